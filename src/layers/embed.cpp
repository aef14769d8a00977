// Patch, positional, timestep and label embeddings (forward and backward).
#include "layers/embed.h"

#include <cmath>

namespace dit {

std::vector<double> pos_embed_2d(int dim, int grid) {
  DIT_CHECK(dim % 4 == 0, "2-D sin-cos positional embedding needs D divisible by 4, got ", dim);
  const int half = dim / 2, quarter = dim / 4;
  std::vector<double> out(static_cast<std::size_t>(grid) * grid * dim);
  for (int i = 0; i < grid; ++i)
    for (int j = 0; j < grid; ++j) {
      double* row = out.data() + (static_cast<std::size_t>(i) * grid + j) * dim;
      // 1-D embedding of a position into `half` features: [sin(pos w_k), cos(pos w_k)],
      // w_k = 10000^(-k / quarter)
      for (int part = 0; part < 2; ++part) {
        const double pos = part == 0 ? j : i;
        for (int k = 0; k < quarter; ++k) {
          const double w = 1.0 / std::pow(10000.0, static_cast<double>(k) / quarter);
          row[part * half + k] = std::sin(pos * w);
          row[part * half + quarter + k] = std::cos(pos * w);
        }
      }
    }
  return out;
}

void Embedders::declare(const DiTConfig& cfg, std::vector<ParamSpec>& s) {
  const std::int64_t d = cfg.hidden_size, c = cfg.in_channels, p = cfg.patch_size;
  const std::int64_t classes = cfg.num_classes + (cfg.class_dropout_prob > 0 ? 1 : 0);
  s.push_back({"x_embedder.proj.weight", {d, c, p, p}, Split::Replicated, 1, Init::XavierUniform});
  s.push_back({"x_embedder.proj.bias", {d}, Split::Replicated, 1, Init::Zero});
  s.push_back({"t_embedder.mlp.0.weight", {d, cfg.frequency_embedding_size}, Split::Replicated, 1,
               Init::Normal002});
  s.push_back({"t_embedder.mlp.0.bias", {d}, Split::Replicated, 1, Init::Zero});
  s.push_back({"t_embedder.mlp.2.weight", {d, d}, Split::Replicated, 1, Init::Normal002});
  s.push_back({"t_embedder.mlp.2.bias", {d}, Split::Replicated, 1, Init::Zero});
  s.push_back({"y_embedder.embedding_table.weight", {classes, d}, Split::Replicated, 1,
               Init::Normal002});
}

Embedders::Embedders(Backend& be, const DiTConfig& cfg, const ParamSet& ps)
    : cfg_(cfg), dtype_(be.compute_dtype()) {
  pe_ = LinearParams::from(ps, "x_embedder.proj");
  t0_ = LinearParams::from(ps, "t_embedder.mlp.0");
  t2_ = LinearParams::from(ps, "t_embedder.mlp.2");
  table_ = ps.value("y_embedder.embedding_table.weight");
  dtable_ = ps.grad("y_embedder.embedding_table.weight");
  const std::vector<double> pos = pos_embed_2d(cfg.hidden_size, cfg.grid());
  std::vector<float> pos32(pos.begin(), pos.end());
  pos_ = Buffer(be, pos32.size() * dtype_size(dtype_));
  be.copy(pos_embed(), Tensor{pos32.data(), DType::F32, pos_embed().shape, Device::Host});
}

EmbedActs Embedders::forward(Backend& be, const Tensor& images, const Tensor& t,
                             const Tensor& ids, Arena& saved) const {
  const std::int64_t n = images.dim(0), d = cfg_.hidden_size, p = cfg_.patch_size;
  const std::int64_t tokens = cfg_.num_patches(), feat = cfg_.in_channels * p * p;
  DIT_CHECK(images.shape == Shape({n, cfg_.in_channels, cfg_.input_size, cfg_.input_size}),
            "model input ", images.shape.str(), ": expected (N, ", cfg_.in_channels, ", ",
            cfg_.input_size, ", ", cfg_.input_size, ")");
  DIT_CHECK(t.numel() == n && ids.numel() == n, "timesteps ", t.shape.str(), " and labels ",
            ids.shape.str(), " must have one entry per sample (", n, ")");
  EmbedActs a;
  a.images = images;
  a.ids = ids;
  a.patches = saved.tensor({n, tokens, feat}, dtype_);
  be.patchify(images, cfg_.patch_size, PatchOrder::ChannelMajor, a.patches);
  a.x0 = saved.tensor({n, tokens, d}, dtype_);
  linear_fwd(be, pe_, a.patches, a.x0, Bias::Add);
  be.add_rowwise(a.x0.view({n, tokens * d}), pos_embed().view({tokens * d}));

  a.tfreq = saved.tensor({n, cfg_.frequency_embedding_size}, dtype_);
  be.timestep_embedding(t, 10000.f, a.tfreq);
  a.t1 = saved.tensor({n, d}, dtype_);
  linear_fwd(be, t0_, a.tfreq, a.t1, Bias::Add);
  a.t1s = saved.tensor({n, d}, dtype_);
  be.silu_fwd(a.t1, a.t1s);
  a.c = saved.tensor({n, d}, dtype_);
  linear_fwd(be, t2_, a.t1s, a.c, Bias::Add);
  Tensor yemb = saved.tensor({n, d}, dtype_);
  be.embedding_fwd(table_, ids, yemb);
  be.axpy(1.f, yemb, a.c);
  return a;
}

void Embedders::backward(Backend& be, const EmbedActs& a, const Tensor& dx0, const Tensor& dc,
                         const Tensor& dimages, Arena& scratch, const WeightSink& w) const {
  const std::int64_t n = dc.dim(0), d = cfg_.hidden_size;
  // pos_embed is fixed; the patch embedding sees dx0 directly. Until W (deferred): the forward's
  // patches, t1s and tfreq, the caller's dx0 and dc, and dt1 (kept).
  Tensor dpatches = dimages.data ? scratch.tensor(a.patches.shape, dtype_) : Tensor{};
  w.linear(be, pe_, a.patches, dx0, Bias::Add);
  linear_bwd_input(be, pe_, dx0, dpatches, Accumulate::Overwrite);
  if (dimages.data) be.unpatchify(dpatches, cfg_.patch_size, PatchOrder::ChannelMajor, dimages);

  be.embedding_bwd(dc, a.ids, dtable_);  // the label table's grad stays in B (a scatter-add)
  Tensor dt1 = w.arena(scratch).tensor({n, d}, dtype_);
  w.linear(be, t2_, a.t1s, dc, Bias::Add);
  linear_bwd_input(be, t2_, dc, dt1, Accumulate::Overwrite);
  be.silu_bwd(a.t1, dt1, dt1, Accumulate::Overwrite);
  w.linear(be, t0_, a.tfreq, dt1, Bias::Add);
}

}  // namespace dit
