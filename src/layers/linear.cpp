// Linear forward/backward as GEMMs on row views.
#include "layers/linear.h"

namespace dit {

LinearParams LinearParams::from(const ParamSet& ps, const std::string& prefix) {
  return {ps.value(prefix + ".weight"), ps.value(prefix + ".bias"), ps.grad(prefix + ".weight"),
          ps.grad(prefix + ".bias"), {}};
}

namespace {
// A weight (out, in...) as a matrix (out, prod(in...)): Conv2d weights (D, C, p, p) act as
// (D, C*p*p).
Tensor as_matrix(const Tensor& w) { return w.view({w.dim(0), w.numel() / w.dim(0)}); }

// The adapter's (rows, r) scratch for a call on x2's rows.
Tensor lora_rows(const Tensor& scratch, std::int64_t rows) {
  DIT_CHECK(rows <= scratch.dim(0), "LoRA scratch holds ", scratch.dim(0), " rows, a call needs ", rows);
  return scratch.rows(0, rows);
}

// t = s x A^T (rows, r)
Tensor lora_down(Backend& be, const LoraAdapter& l, const Tensor& x2) {
  const Tensor t = lora_rows(l.t, x2.dim(0));
  be.gemm(x2, Transpose::No, l.a, Transpose::Yes, t, Accumulate::Overwrite);
  be.scale(t, l.scale);
  return t;
}

// u = s dy B (rows, r)
Tensor lora_back(Backend& be, const LoraAdapter& l, const Tensor& dy2) {
  const Tensor u = lora_rows(l.u, dy2.dim(0));
  be.gemm(dy2, Transpose::No, l.b, Transpose::No, u, Accumulate::Overwrite);
  be.scale(u, l.scale);
  return u;
}
}  // namespace

void linear_fwd(Backend& be, const LinearParams& p, const Tensor& x, const Tensor& y, Bias bias) {
  const Tensor w = as_matrix(p.w);
  const Tensor y2 = as_rows(y);
  if (bias == Bias::Add)
    be.gemm_bias(as_rows(x), Transpose::No, w, Transpose::Yes, p.b, y2);
  else
    be.gemm(as_rows(x), Transpose::No, w, Transpose::Yes, y2, Accumulate::Overwrite);
  if (p.lora.enabled())
    be.gemm(lora_down(be, p.lora, as_rows(x)), Transpose::No, p.lora.b, Transpose::Yes, y2, Accumulate::Add);
}

void linear_bwd_weight(Backend& be, const LinearParams& p, const Tensor& x, const Tensor& dy, Bias bias) {
  const Tensor dy2 = as_rows(dy);
  be.gemm(dy2, Transpose::Yes, as_rows(x), Transpose::No, as_matrix(p.dw), Accumulate::Add);
  if (bias == Bias::Add) be.sum_rows(dy2, p.db, Accumulate::Add);
  if (!p.lora.enabled()) return;
  const Tensor x2 = as_rows(x);
  be.gemm(dy2, Transpose::Yes, lora_down(be, p.lora, x2), Transpose::No, p.lora.db, Accumulate::Add);
  be.gemm(lora_back(be, p.lora, dy2), Transpose::Yes, x2, Transpose::No, p.lora.da, Accumulate::Add);
}

void linear_bwd_input(Backend& be, const LinearParams& p, const Tensor& dy, const Tensor& dx, Accumulate dx_acc) {
  if (!dx.data) return;
  be.gemm(as_rows(dy), Transpose::No, as_matrix(p.w), Transpose::No, as_rows(dx), dx_acc);
  if (p.lora.enabled())
    be.gemm(lora_back(be, p.lora, as_rows(dy)), Transpose::No, p.lora.a, Transpose::No, as_rows(dx), Accumulate::Add);
}

void linear_bwd(Backend& be, const LinearParams& p, const Tensor& x, const Tensor& dy,
                const Tensor& dx, Accumulate dx_acc, Bias bias) {
  linear_bwd_weight(be, p, x, dy, bias);
  linear_bwd_input(be, p, dy, dx, dx_acc);
}

void run_weight_grads(Backend& be, const std::vector<WeightGrad>& queue) {
  for (const WeightGrad& g : queue) linear_bwd_weight(be, g.p, g.x, g.dy, g.bias);
}

}  // namespace dit
