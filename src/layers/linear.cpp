// Linear forward/backward as GEMMs on row views.
#include "layers/linear.h"

namespace dit {

LinearParams LinearParams::from(const ParamSet& ps, const std::string& prefix) {
  return {ps.value(prefix + ".weight"), ps.value(prefix + ".bias"), ps.grad(prefix + ".weight"),
          ps.grad(prefix + ".bias")};
}

namespace {
// A weight (out, in...) as a matrix (out, prod(in...)): Conv2d weights (D, C, p, p) act as
// (D, C*p*p).
Tensor as_matrix(const Tensor& w) { return w.view({w.dim(0), w.numel() / w.dim(0)}); }
}  // namespace

void linear_fwd(Backend& be, const LinearParams& p, const Tensor& x, const Tensor& y, Bias bias) {
  const Tensor w = as_matrix(p.w);
  const Tensor y2 = as_rows(y);
  if (bias == Bias::Add)
    be.gemm_bias(as_rows(x), Transpose::No, w, Transpose::Yes, p.b, y2);
  else
    be.gemm(as_rows(x), Transpose::No, w, Transpose::Yes, y2, Accumulate::Overwrite);
}

void linear_bwd_weight(Backend& be, const LinearParams& p, const Tensor& x, const Tensor& dy, Bias bias) {
  const Tensor dy2 = as_rows(dy);
  be.gemm(dy2, Transpose::Yes, as_rows(x), Transpose::No, as_matrix(p.dw), Accumulate::Add);
  if (bias == Bias::Add) be.sum_rows(dy2, p.db, Accumulate::Add);
}

void linear_bwd_input(Backend& be, const LinearParams& p, const Tensor& dy, const Tensor& dx, Accumulate dx_acc) {
  if (dx.data) be.gemm(as_rows(dy), Transpose::No, as_matrix(p.w), Transpose::No, as_rows(dx), dx_acc);
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
