// Linear layers, y = x W^T + b with W stored (out, in) as in PyTorch, and their explicit backward.
// Megatron's column-parallel (W = [W_1; ...; W_tp] by output rows) and row-parallel
// (W = [W_1 ... W_tp] by input columns) variants are the same calls on the local slices; the
// caller adds the collectives (see dit_block.cpp).
#pragma once

#include <vector>

#include "backend/backend.h"
#include "core/arena.h"
#include "layers/params.h"

namespace dit {

// A low-rank adapter on a linear layer (LoRA, Hu et al. 2021): y = x W^T + b + s (x A^T) B^T with
// A (r, in), B (out, r) and s = alpha / r (layers/lora.h declares and attaches them). Under tensor
// parallelism A and B split as W does on their shared side: a column-parallel W's B keeps this
// rank's output rows (A whole), a row-parallel W's A its input columns (B whole), so the adapter
// adds to exactly the partial output the layer's collective already sums. The whole factor's
// gradient is then a partial sum over tp that the owner all-reduces once a step.
struct LoraAdapter {
  Tensor a, b;    // (r, in), (out, r): this rank's slices
  Tensor da, db;  // fp32 gradients, accumulated
  float scale = 0;
  Tensor t, u;    // (max_rows, r) scratch in the compute dtype, shared by every adapter
  bool enabled() const { return a.data != nullptr; }
};

// Views of a linear layer's weight and bias and of their gradients.
struct LinearParams {
  Tensor w, b;    // (out, in), (out)
  Tensor dw, db;  // same shapes, accumulated
  LoraAdapter lora;  // none unless attached

  static LinearParams from(const ParamSet& ps, const std::string& prefix);
};

// A (..., L) tensor seen as (rows, L).
inline Tensor as_rows(const Tensor& t) {
  const std::int64_t l = t.dim(-1);
  return t.view({t.numel() / l, l});
}

enum class Bias : std::uint8_t { Add, Skip };

// y (R, out) = x (R, in) W^T (+ b)
void linear_fwd(Backend& be, const LinearParams& p, const Tensor& x, const Tensor& y, Bias bias);
// With an adapter, its term joins y; dA, dB are added beside dW, and dx gets the adapter's part.
// dW += dy^T x;  db += sum_rows dy (when bias == Add);  dx (=|+=) dy W when dx has data.
// linear_bwd is linear_bwd_weight then linear_bwd_input: the halves run apart give the same bits.
void linear_bwd(Backend& be, const LinearParams& p, const Tensor& x, const Tensor& dy,
                const Tensor& dx, Accumulate dx_acc, Bias bias);
void linear_bwd_input(Backend& be, const LinearParams& p, const Tensor& dy, const Tensor& dx, Accumulate dx_acc);
void linear_bwd_weight(Backend& be, const LinearParams& p, const Tensor& x, const Tensor& dy, Bias bias);

// A weight gradient a split backward owes: linear_bwd_weight(p, x, dy, bias) later.
struct WeightGrad {
  LinearParams p;
  Tensor x, dy;
  Bias bias = Bias::Add;
};

// Where a backward puts its weight gradients. The default adds them at once (the fused backward).
// A deferring sink queues them for run_weight_grads (the zero-bubble W pass) and names the arena
// that lives until then: the tensors the queued gradients read must come from arena(scratch).
class WeightSink {
 public:
  WeightSink() = default;
  WeightSink(std::vector<WeightGrad>& queue, Arena& keep) : queue_(&queue), keep_(&keep) {}
  bool deferred() const { return queue_ != nullptr; }
  // Where to allocate what a weight gradient reads: the kept arena when deferred, else scratch.
  Arena& arena(Arena& scratch) const { return queue_ ? *keep_ : scratch; }
  void linear(Backend& be, const LinearParams& p, const Tensor& x, const Tensor& dy, Bias bias) const {
    if (queue_)
      queue_->push_back({p, x, dy, bias});
    else
      linear_bwd_weight(be, p, x, dy, bias);
  }

 private:
  std::vector<WeightGrad>* queue_ = nullptr;
  Arena* keep_ = nullptr;
};

// The W pass: every queued weight gradient, in the order queued.
void run_weight_grads(Backend& be, const std::vector<WeightGrad>& queue);

}  // namespace dit
