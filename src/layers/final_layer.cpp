// DiT final layer forward and backward.
#include "layers/final_layer.h"

namespace dit {

void FinalLayer::declare(const DiTConfig& cfg, std::vector<ParamSpec>& s) {
  const std::int64_t d = cfg.hidden_size, p = cfg.patch_size;
  if (cfg.norm == NormKind::RmsNorm)  // LightningDiT's norm_final (DiT's LayerNorm has no weight)
    s.push_back({"final_layer.norm_final.weight", {d}, Split::Replicated, 1, Init::One});
  // Zero-initialized, as the official code does, so the model starts by predicting zero.
  s.push_back({"final_layer.adaLN_modulation.1.weight", {2 * d, d}, Split::Replicated, 1, Init::Zero});
  s.push_back({"final_layer.adaLN_modulation.1.bias", {2 * d}, Split::Replicated, 1, Init::Zero});
  s.push_back({"final_layer.linear.weight", {p * p * cfg.out_channels(), d}, Split::Replicated, 1,
               Init::Zero});
  s.push_back({"final_layer.linear.bias", {p * p * cfg.out_channels()}, Split::Replicated, 1,
               Init::Zero});
}

FinalLayer::FinalLayer(const DiTConfig& cfg, const ParamSet& ps) : cfg_(cfg) {
  ada_ = LinearParams::from(ps, "final_layer.adaLN_modulation.1");
  linear_ = LinearParams::from(ps, "final_layer.linear");
  norm_ = NormWeight::from(ps, "final_layer.norm_final");
}

FinalActs FinalLayer::forward(Backend& be, const Tensor& x, const Tensor& silu_c, Arena& saved,
                              Arena& scratch) const {
  const std::int64_t n = x.dim(0), t = x.dim(1), d = cfg_.hidden_size, p = cfg_.patch_size;
  const std::int64_t cout = cfg_.out_channels();
  const DType dt = be.compute_dtype();
  FinalActs a;
  a.x_in = x;
  a.mod = saved.tensor({n, 2 * d}, dt);
  linear_fwd(be, ada_, silu_c, a.mod, Bias::Add);
  a.mean = saved.tensor({n * t}, DType::F32);
  a.rstd = saved.tensor({n * t}, DType::F32);
  a.h = saved.tensor({n, t, d}, dt);
  norm_modulate_fwd(be, cfg_.norm, norm_, static_cast<float>(cfg_.layernorm_eps), x, {a.mod, 0},
                    {a.mod, 1}, a.h, a.mean, a.rstd);
  Tensor patches = scratch.tensor({n, t, p * p * cout}, dt);
  linear_fwd(be, linear_, a.h, patches, Bias::Add);
  a.out = saved.tensor({n, cout, cfg_.input_size, cfg_.input_size}, dt);
  be.unpatchify(patches, cfg_.patch_size, PatchOrder::ChannelMinor, a.out);
  return a;
}

void FinalLayer::backward(Backend& be, const FinalActs& a, const Tensor& silu_c, const Tensor& dout,
                          const Tensor& dx, const Tensor& dsilu_c, Arena& scratch, const WeightSink& w) const {
  const std::int64_t n = a.h.dim(0), t = a.h.dim(1), d = cfg_.hidden_size, p = cfg_.patch_size;
  const DType dt = be.compute_dtype();
  // Until W (deferred): h and SiLU(c), the forward's; dpatches and dmod, kept.
  Arena& keep = w.arena(scratch);
  Tensor dpatches = keep.tensor({n, t, p * p * cfg_.out_channels()}, dt);
  be.patchify(dout, cfg_.patch_size, PatchOrder::ChannelMinor, dpatches);
  Tensor dh = scratch.tensor({n, t, d}, dt);
  w.linear(be, linear_, a.h, dpatches, Bias::Add);
  linear_bwd_input(be, linear_, dpatches, dh, Accumulate::Overwrite);
  Tensor dmod = keep.tensor({n, 2 * d}, dt);
  norm_modulate_bwd(be, cfg_.norm, norm_, dh, a.x_in, a.mean, a.rstd, {a.mod, 1}, dx,
                    Accumulate::Overwrite, {dmod, 0}, {dmod, 1}, norm_.dw);
  w.linear(be, ada_, silu_c, dmod, Bias::Add);
  linear_bwd_input(be, ada_, dmod, dsilu_c, Accumulate::Overwrite);
}

}  // namespace dit
