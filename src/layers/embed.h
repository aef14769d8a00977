// The input side of DiT, owned by pipeline stage 0:
//   x0 = patchify(x) W_pe^T + b_pe + pos_embed          (N, T, D)  patch embedding (strided conv)
//   c  = MLP(freq(t)) + table[y]                          (N, D)     timestep + label conditioning
// pos_embed is the fixed 2-D sin-cos table of the official code (not trained).
#pragma once

#include <vector>

#include "backend/backend.h"
#include "layers/dit_config.h"
#include "layers/linear.h"

namespace dit {

// The official get_2d_sincos_pos_embed(D, grid): (grid*grid, D), computed in float64. For token
// (i, j) the first D/2 features encode the column j and the last D/2 the row i.
std::vector<double> pos_embed_2d(int dim, int grid);

struct EmbedActs {
  Tensor images;   // (N, C, H, W) input (owned by the caller)
  Tensor ids;      // (N) int32 labels, num_classes = the null label
  Tensor patches;  // (N, T, C*p*p)
  Tensor tfreq;    // (N, F) sinusoidal timestep features
  Tensor t1;       // (N, D) first timestep-MLP layer, before SiLU
  Tensor t1s;      // (N, D) after SiLU
  Tensor x0;       // (N, T, D) tokens entering block 0
  Tensor c;        // (N, D) conditioning
};

class Embedders {
 public:
  Embedders(Backend& be, const DiTConfig& cfg, const ParamSet& ps);
  static void declare(const DiTConfig& cfg, std::vector<ParamSpec>& specs);

  // images (N, C, H, W), t (N) fp32 timesteps as the model sees them, ids (N) int32.
  EmbedActs forward(Backend& be, const Tensor& images, const Tensor& t, const Tensor& ids,
                    Arena& saved) const;
  // dx0 (N, T, D), dc (N, D): parameter grads accumulate (the linears' through `w`, default at
  // once); dimages (if it has data) is written.
  void backward(Backend& be, const EmbedActs& a, const Tensor& dx0, const Tensor& dc,
                const Tensor& dimages, Arena& scratch, const WeightSink& w = {}) const;
  Tensor pos_embed() const { return pos_.tensor({cfg_.num_patches(), cfg_.hidden_size}, dtype_); }

 private:
  DiTConfig cfg_;
  DType dtype_;
  LinearParams pe_, t0_, t2_;
  Tensor table_, dtable_;
  Buffer pos_;
};

}  // namespace dit
