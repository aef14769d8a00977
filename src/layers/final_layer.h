// DiT's final layer, owned by the last pipeline stage (replicated over tp):
//   shift, scale = adaLN(SiLU(c));  out = unpatchify(linear(LN(x) * (1 + scale) + shift))
// (model.norm = rmsnorm: RMSNorm with LightningDiT's norm_final weight in place of LN)
// out is (N, C_out, H, W) with C_out = 2C when the variance is learned.
#pragma once

#include "backend/backend.h"
#include "layers/dit_config.h"
#include "layers/linear.h"
#include "layers/norm.h"

namespace dit {

struct FinalActs {
  Tensor x_in;        // (N, T, D) owned upstream
  Tensor mod;         // (N, 2D)
  Tensor mean, rstd;  // (N*T)
  Tensor h;           // (N, T, D) modulated norm, input of the linear layer
  Tensor out;         // (N, C_out, H, W)
};

class FinalLayer {
 public:
  FinalLayer(const DiTConfig& cfg, const ParamSet& ps);
  static void declare(const DiTConfig& cfg, std::vector<ParamSpec>& specs);

  FinalActs forward(Backend& be, const Tensor& x, const Tensor& silu_c, Arena& saved,
                    Arena& scratch) const;
  // dout (N, C_out, H, W) -> dx (N, T, D) (overwritten) and dsilu_c (N, D) (overwritten); the two
  // linears' weight grads go to `w` (default: added at once).
  void backward(Backend& be, const FinalActs& a, const Tensor& silu_c, const Tensor& dout,
                const Tensor& dx, const Tensor& dsilu_c, Arena& scratch, const WeightSink& w = {}) const;

 private:
  DiTConfig cfg_;
  LinearParams ada_, linear_;
  NormWeight norm_;  // RMSNorm's weight (no data for LayerNorm)
};

}  // namespace dit
