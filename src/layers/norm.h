// The modulated norms of the blocks and the final layer, h = norm(x) * (1 + scale) + shift, with
// norm DiT's LayerNorm (no affine weights) or LightningDiT's RMSNorm (a weight), and the affine
// parameters of a norm by name.
#pragma once

#include "backend/backend.h"
#include "layers/dit_config.h"
#include "layers/params.h"

namespace dit {

// A norm's affine parameters and their gradients (no data where the norm has none).
struct NormWeight {
  Tensor w, b, dw, db;
  // "<prefix>.weight" and "<prefix>.bias" where the set has them; no data otherwise.
  static NormWeight from(const ParamSet& ps, const std::string& prefix);
};

// h (N, T, D) = norm(x) * (1 + scale) + shift. mean and rstd (N*T) fp32 (mean unused by RMSNorm).
void norm_modulate_fwd(Backend& be, NormKind kind, const NormWeight& w, float eps, const Tensor& x,
                       const ModChunk& shift, const ModChunk& scale, const Tensor& h,
                       const Tensor& mean, const Tensor& rstd);
// dx (acc chooses), the shift and scale chunks of dmod (overwritten), and RMSNorm's weight grad
// accumulated into dweight (fp32 (D); pass w.dw, or a partial sum the caller reduces).
void norm_modulate_bwd(Backend& be, NormKind kind, const NormWeight& w, const Tensor& dh,
                       const Tensor& x, const Tensor& mean, const Tensor& rstd,
                       const ModChunk& scale, const Tensor& dx, Accumulate acc,
                       const ModChunk& dshift, const ModChunk& dscale, const Tensor& dweight);

}  // namespace dit
