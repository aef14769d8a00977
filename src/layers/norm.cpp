// Modulated LayerNorm / RMSNorm over the backend's fused primitives.
#include "layers/norm.h"

namespace dit {

NormWeight NormWeight::from(const ParamSet& ps, const std::string& prefix) {
  NormWeight n;
  if (ps.index(prefix + ".weight") >= 0) {
    n.w = ps.value(prefix + ".weight");
    n.dw = ps.grad(prefix + ".weight");
  }
  if (ps.index(prefix + ".bias") >= 0) {
    n.b = ps.value(prefix + ".bias");
    n.db = ps.grad(prefix + ".bias");
  }
  return n;
}

void norm_modulate_fwd(Backend& be, NormKind kind, const NormWeight& w, float eps, const Tensor& x,
                       const ModChunk& shift, const ModChunk& scale, const Tensor& h,
                       const Tensor& mean, const Tensor& rstd) {
  if (kind == NormKind::LayerNorm)
    be.ln_modulate_fwd(x, shift, scale, eps, h, mean, rstd);
  else
    be.rms_modulate_fwd(x, w.w, shift, scale, eps, h, rstd);
}

void norm_modulate_bwd(Backend& be, NormKind kind, const NormWeight& w, const Tensor& dh,
                       const Tensor& x, const Tensor& mean, const Tensor& rstd,
                       const ModChunk& scale, const Tensor& dx, Accumulate acc,
                       const ModChunk& dshift, const ModChunk& dscale, const Tensor& dweight) {
  if (kind == NormKind::LayerNorm)
    be.ln_modulate_bwd(dh, x, mean, rstd, scale, dx, acc, dshift, dscale);
  else
    be.rms_modulate_bwd(dh, x, rstd, w.w, scale, dx, acc, dweight, dshift, dscale);
}

}  // namespace dit
