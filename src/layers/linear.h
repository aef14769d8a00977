// Linear layers, y = x W^T + b with W stored (out, in) as in PyTorch, and their explicit backward.
// Megatron's column-parallel (W = [W_1; ...; W_tp] by output rows) and row-parallel
// (W = [W_1 ... W_tp] by input columns) variants are the same calls on the local slices; the
// caller adds the collectives (see dit_block.cpp).
#pragma once

#include "backend/backend.h"
#include "layers/params.h"

namespace dit {

// Views of a linear layer's weight and bias and of their gradients.
struct LinearParams {
  Tensor w, b;    // (out, in), (out)
  Tensor dw, db;  // same shapes, accumulated

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
// dW += dy^T x;  db += sum_rows dy (when bias == Add);  dx (=|+=) dy W when dx has data.
void linear_bwd(Backend& be, const LinearParams& p, const Tensor& x, const Tensor& dy,
                const Tensor& dx, Accumulate dx_acc, Bias bias);

}  // namespace dit
