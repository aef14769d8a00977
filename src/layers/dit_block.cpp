// DiT block forward and explicit backward (see dit_block.h for the math and the tp split).
#include "layers/dit_block.h"

#include "layers/lora.h"
#include "parallel/sequence_parallel.h"

namespace dit {

namespace {
// Modulation chunks of the block's (N, 6D) adaLN output, in the official order.
enum Chunk : int { kShift1 = 0, kScale1, kGate1, kShift2, kScale2, kGate2 };

// The q/k norm's eps: LightningDiT's RMSNorm default, or nn.LayerNorm's.
float head_norm_eps(NormKind kind) { return kind == NormKind::RmsNorm ? 1e-6f : 1e-5f; }

// Sums grads of replicated parameters that this rank computed from part of the data (its heads,
// or its tokens under sequence parallelism) over tp: `compute` accumulates into zeroed fp32
// stand-ins, which are all-reduced and added to the real grads. With `partial` false, or tp = 1,
// `compute` writes the real grads directly.
template <class F>
void tp_summed(Backend& be, Comm& tp, bool partial, std::vector<Tensor> grads, Arena& scratch,
               F compute) {
  if (!partial || tp.size() == 1) return compute(grads);
  std::vector<Tensor> parts;
  for (const Tensor& g : grads) {
    parts.push_back(g.data ? scratch.tensor(g.shape, DType::F32) : g);
    if (g.data) be.fill(parts.back(), 0.f);
  }
  compute(parts);
  for (std::size_t i = 0; i < grads.size(); ++i) {
    if (!grads[i].data) continue;
    tp.all_reduce_sum(parts[i]);
    be.axpy(1.f, parts[i], grads[i]);
  }
}
}  // namespace

DiTBlock::DiTBlock(const DiTConfig& cfg, const ParamSet& ps, int index, Comm& tp, Tokens tokens)
    : cfg_(cfg), tp_(&tp), tokens_(tokens), prefix_("blocks." + std::to_string(index)) {
  const std::string& p = prefix_;
  qkv_ = LinearParams::from(ps, p + ".attn.qkv");
  proj_ = LinearParams::from(ps, p + ".attn.proj");
  if (cfg.mlp == MlpKind::Gelu) {
    fc1_ = LinearParams::from(ps, p + ".mlp.fc1");
    fc2_ = LinearParams::from(ps, p + ".mlp.fc2");
  }
  ada_ = LinearParams::from(ps, p + ".adaLN_modulation.1");
  if (cfg.mlp == MlpKind::Swiglu) {
    fc1_ = LinearParams::from(ps, p + ".mlp.w12");
    fc2_ = LinearParams::from(ps, p + ".mlp.w3");
  }
  norm1_ = NormWeight::from(ps, p + ".norm1");
  norm2_ = NormWeight::from(ps, p + ".norm2");
  q_norm_ = NormWeight::from(ps, p + ".attn.q_norm");
  k_norm_ = NormWeight::from(ps, p + ".attn.k_norm");
}

void DiTBlock::attach_lora(const ParamSet& lora, float scale, const Tensor& t, const Tensor& u) {
  const bool swiglu = cfg_.mlp == MlpKind::Swiglu;
  const std::pair<LinearParams*, const char*> linears[] = {{&qkv_, ".attn.qkv"},
                                                           {&proj_, ".attn.proj"},
                                                           {&fc1_, swiglu ? ".mlp.w12" : ".mlp.fc1"},
                                                           {&fc2_, swiglu ? ".mlp.w3" : ".mlp.fc2"},
                                                           {&ada_, ".adaLN_modulation.1"}};
  for (const auto& [linear, name] : linears) linear->lora = lora_adapter(lora, prefix_ + name, scale, t, u);
}

void DiTBlock::declare(const DiTConfig& cfg, int index, std::vector<ParamSpec>& s) {
  const std::int64_t d = cfg.hidden_size, m = cfg.mlp_hidden(), f = cfg.swiglu_hidden();
  const std::int64_t e = cfg.head_dim();
  const std::string p = "blocks." + std::to_string(index);
  const bool rms = cfg.norm == NormKind::RmsNorm;
  // LightningDiT's module order: norm1, attn (qkv, q_norm, k_norm, proj), norm2, mlp, adaLN.
  if (rms) s.push_back({p + ".norm1.weight", {d}, Split::Replicated, 1, Init::One});
  s.push_back({p + ".attn.qkv.weight", {3 * d, d}, Split::Column, 3, Init::XavierUniform});
  s.push_back({p + ".attn.qkv.bias", {3 * d}, Split::Column, 3, Init::Zero});
  if (cfg.qk_norm)
    for (const char* qk : {".attn.q_norm", ".attn.k_norm"}) {
      s.push_back({p + qk + ".weight", {e}, Split::Replicated, 1, Init::One});
      if (!rms) s.push_back({p + qk + ".bias", {e}, Split::Replicated, 1, Init::Zero});
    }
  s.push_back({p + ".attn.proj.weight", {d, d}, Split::Row, 1, Init::XavierUniform});
  s.push_back({p + ".attn.proj.bias", {d}, Split::Replicated, 1, Init::Zero});
  if (rms) s.push_back({p + ".norm2.weight", {d}, Split::Replicated, 1, Init::One});
  if (cfg.mlp == MlpKind::Swiglu) {
    // [x1 | x2] rows: two column groups, so each rank holds matching slices of both halves.
    s.push_back({p + ".mlp.w12.weight", {2 * f, d}, Split::Column, 2, Init::XavierUniform});
    s.push_back({p + ".mlp.w12.bias", {2 * f}, Split::Column, 2, Init::Zero});
    s.push_back({p + ".mlp.w3.weight", {d, f}, Split::Row, 1, Init::XavierUniform});
    s.push_back({p + ".mlp.w3.bias", {d}, Split::Replicated, 1, Init::Zero});
  } else {
    s.push_back({p + ".mlp.fc1.weight", {m, d}, Split::Column, 1, Init::XavierUniform});
    s.push_back({p + ".mlp.fc1.bias", {m}, Split::Column, 1, Init::Zero});
    s.push_back({p + ".mlp.fc2.weight", {d, m}, Split::Row, 1, Init::XavierUniform});
    s.push_back({p + ".mlp.fc2.bias", {d}, Split::Replicated, 1, Init::Zero});
  }
  // adaLN-Zero: the modulation starts at zero so every block starts as the identity.
  s.push_back({p + ".adaLN_modulation.1.weight", {6 * d, d}, Split::Column, 1, Init::Zero});
  s.push_back({p + ".adaLN_modulation.1.bias", {6 * d}, Split::Column, 1, Init::Zero});
}

Tensor DiTBlock::adaln_forward(Backend& be, const Tensor& silu_c, Arena& saved,
                               Arena& scratch) const {
  const std::int64_t n = silu_c.dim(0), d = cfg_.hidden_size, tp = tp_->size();
  const DType dt = be.compute_dtype();
  Tensor mod = saved.tensor({n, 6 * d}, dt);
  if (tp == 1) {
    linear_fwd(be, ada_, silu_c, mod, Bias::Add);
    return mod;
  }
  // Each rank computes its 6D/tp columns; gathering gives (tp, N, 6D/tp), reordered to (N, 6D).
  Tensor local = scratch.tensor({n, 6 * d / tp}, dt);
  Tensor gathered = scratch.tensor({tp, n, 6 * d / tp}, dt);
  linear_fwd(be, ada_, silu_c, local, Bias::Add);
  tp_->all_gather(local, gathered);
  be.transpose_01(gathered, mod.view({n, tp, 6 * d / tp}));
  return mod;
}

void DiTBlock::adaln_backward(Backend& be, const Tensor& silu_c, const Tensor& dmod,
                              const Tensor& dsilu_c, Arena& scratch, const WeightSink& w) const {
  const std::int64_t n = silu_c.dim(0), d = cfg_.hidden_size, tp = tp_->size();
  Tensor dlocal = dmod;
  if (tp > 1) {
    // This rank's columns of dmod: identical on every rank, or under sequence parallelism a
    // partial sum over this rank's tokens that the reduce-scatter completes (in B: a collective).
    Arena& keep = w.arena(scratch);
    Tensor all = (sp() ? scratch : keep).tensor({tp, n, 6 * d / tp}, be.compute_dtype());
    be.transpose_01(dmod.view({n, tp, 6 * d / tp}), all);
    dlocal = all.rows(tp_->rank(), 1).view({n, 6 * d / tp});
    if (sp()) {
      dlocal = keep.tensor({n, 6 * d / tp}, be.compute_dtype());
      tp_->reduce_scatter_sum(all, dlocal);
    }
  }
  w.linear(be, ada_, silu_c, dlocal, Bias::Add);
  linear_bwd_input(be, ada_, dlocal, dsilu_c, Accumulate::Add);
}

Recompute parse_recompute(const std::string& name) {
  if (const auto r = value_of(kRecomputeNames, name)) return *r;
  DIT_FAIL("unknown recompute mode '", name, "': expected ", names_of(kRecomputeNames, " or "));
}

std::string recompute_name(Recompute r) { return name_of(kRecomputeNames, r); }

void DiTBlock::modulated_norm(Backend& be, const Tensor& x, const Tensor& mod, int shift,
                              const NormWeight& w, Arena& arena, Arena& scratch, Tensor& h,
                              Tensor& mean, Tensor& rstd) const {
  const std::int64_t n = x.dim(0), t = x.dim(1), d = cfg_.hidden_size;
  mean = arena.tensor({n * t}, DType::F32);
  rstd = arena.tensor({n * t}, DType::F32);
  h = arena.tensor({n, t * token_split(), d}, be.compute_dtype());
  const Tensor mine = sp() ? scratch.tensor({n, t, d}, be.compute_dtype()) : h;
  norm_modulate_fwd(be, cfg_.norm, w, static_cast<float>(cfg_.layernorm_eps), x, {mod, shift},
                    {mod, shift + 1}, mine, mean, rstd);
  if (sp()) gather_tokens(*tp_, be, mine, h, scratch);
}

void DiTBlock::attn_norm(Backend& be, BlockActs& a, Arena& arena, Arena& scratch) const {
  modulated_norm(be, a.x_in, a.mod, kShift1, norm1_, arena, scratch, a.h1, a.mean1, a.rstd1);
}

void DiTBlock::attn_residual(Backend& be, BlockActs& a, Arena& arena) const {
  a.x_mid = arena.tensor(a.x_in.shape, be.compute_dtype());
  be.copy(a.x_mid, a.x_in);
  be.gate_residual_fwd(a.x_mid, a.o1, {a.mod, kGate1});
}

void DiTBlock::mlp_norm(Backend& be, BlockActs& a, Arena& arena, Arena& scratch) const {
  modulated_norm(be, a.x_mid, a.mod, kShift2, norm2_, arena, scratch, a.h2, a.mean2, a.rstd2);
}

void DiTBlock::row_parallel_fwd(Backend& be, const LinearParams& p, const Tensor& in,
                                const Tensor& out, Arena& scratch) const {
  if (sp()) {
    const Tensor partial = scratch.tensor({in.dim(0), in.dim(1), out.dim(2)}, out.dtype);
    linear_fwd(be, p, in, partial, Bias::Skip);
    reduce_scatter_tokens(*tp_, be, partial, out, scratch);
  } else {
    linear_fwd(be, p, in, out, Bias::Skip);
    tp_->all_reduce_sum(out);
  }
  be.add_rowwise(as_rows(out), p.b);  // once, after the sum
}

Tensor DiTBlock::row_parallel_dy(Backend& be, const Tensor& dy, Arena& into, Arena& scratch) const {
  if (!sp()) return dy;
  const Tensor full = into.tensor({dy.dim(0), dy.dim(1) * token_split(), dy.dim(2)}, dy.dtype);
  gather_tokens(*tp_, be, dy, full, scratch);
  return full;
}

Tensor DiTBlock::column_parallel_dx(Backend& be, const Tensor& dfull, Arena& scratch) const {
  if (!sp()) {
    tp_->all_reduce_sum(dfull);
    return dfull;
  }
  const Tensor mine = scratch.tensor({dfull.dim(0), dfull.dim(1) / token_split(), dfull.dim(2)}, dfull.dtype);
  reduce_scatter_tokens(*tp_, be, dfull, mine, scratch);
  return mine;
}

void DiTBlock::mlp_act(Backend& be, BlockActs& a, Arena& arena) const {
  if (cfg_.mlp == MlpKind::Swiglu) {
    a.g1 = arena.tensor({a.f1.dim(0), a.f1.dim(1), a.f1.dim(2) / 2}, be.compute_dtype());
    be.swiglu_fwd(a.f1, a.g1);
    return;
  }
  a.g1 = arena.tensor(a.f1.shape, be.compute_dtype());
  be.gelu_tanh_fwd(a.f1, a.g1);
}

HeadNorm DiTBlock::head_norm() const {
  const bool rms = cfg_.norm == NormKind::RmsNorm;
  return {rms ? HeadNormKind::RmsNorm : HeadNormKind::LayerNorm, head_norm_eps(cfg_.norm),
          q_norm_.w, q_norm_.b, k_norm_.w, k_norm_.b};
}

void DiTBlock::qk_transform(Backend& be, BlockActs& a, Arena& arena) const {
  a.qkv_a = a.qkv;
  if (!cfg_.qk_norm && cfg_.pos_embed != PosEmbed::Rope) return;
  const int heads = cfg_.num_heads / tp_->size();
  a.qkv_a = arena.tensor(a.qkv.shape, be.compute_dtype());
  Tensor src = a.qkv;
  if (cfg_.qk_norm) {
    const std::int64_t rows = a.qkv.dim(0) * a.qkv.dim(1);
    a.qk_mean = arena.tensor({rows, 2, heads}, DType::F32);
    a.qk_rstd = arena.tensor({rows, 2, heads}, DType::F32);
    be.head_norm_fwd(a.qkv, heads, head_norm(), a.qkv_a, a.qk_mean, a.qk_rstd);
    src = a.qkv_a;
  }
  if (cfg_.pos_embed == PosEmbed::Rope) be.rope_fwd(src, heads, cfg_.grid(), a.qkv_a);
}

void DiTBlock::qk_transform_bwd(Backend& be, const BlockActs& a, const Tensor& dqkv_a,
                                const Tensor& dqkv, Arena& scratch) const {
  const int heads = cfg_.num_heads / tp_->size();
  const bool rope = cfg_.pos_embed == PosEmbed::Rope;
  if (!cfg_.qk_norm) {
    if (rope) be.rope_bwd(dqkv_a, heads, cfg_.grid(), dqkv);
    return;
  }
  if (rope) be.rope_bwd(dqkv_a, heads, cfg_.grid(), dqkv_a);
  // Each rank's heads give part of the replicated q/k norm weights' grads.
  const HeadNorm p = head_norm();
  tp_summed(be, *tp_, true, {q_norm_.dw, q_norm_.db, k_norm_.dw, k_norm_.db}, scratch,
            [&](const std::vector<Tensor>& g) {
              be.head_norm_bwd(dqkv_a, a.qkv, a.qk_mean, a.qk_rstd, heads, p,
                               {g[0], g[1], g[2], g[3]}, dqkv);
            });
}

void DiTBlock::modulated_norm_bwd(Backend& be, const Tensor& dh, const Tensor& x,
                                  const Tensor& mean, const Tensor& rstd, const Tensor& mod,
                                  int shift, const NormWeight& w, const Tensor& dx,
                                  const Tensor& dmod, Arena& scratch) const {
  // Under sequence parallelism a rank's tokens give part of RMSNorm's weight grad.
  tp_summed(be, *tp_, sp(), {w.dw}, scratch, [&](const std::vector<Tensor>& g) {
    norm_modulate_bwd(be, cfg_.norm, w, dh, x, mean, rstd, {mod, shift + 1}, dx, Accumulate::Add,
                      {dmod, shift}, {dmod, shift + 1}, g[0]);
  });
}

BlockActs DiTBlock::forward(Backend& be, const Tensor& x_in, const Tensor& silu_c, Arena& saved,
                            Arena& scratch, Recompute mode) const {
  const std::int64_t n = x_in.dim(0), t = x_in.dim(1), tf = t * token_split(), d = cfg_.hidden_size;
  const std::int64_t tp = tp_->size(), heads = cfg_.num_heads / tp;
  const std::int64_t f1_width = cfg_.mlp == MlpKind::Swiglu ? 2 * cfg_.swiglu_hidden() : cfg_.mlp_hidden();
  const DType dt = be.compute_dtype();
  // Where each tensor lives: `cheap` ones are dropped by selective and full recomputation,
  // `heavy` ones (GEMM and attention outputs, mod) only by full recomputation.
  Arena& cheap = mode == Recompute::None ? saved : scratch;
  Arena& heavy = mode == Recompute::Full ? scratch : saved;
  BlockActs a;
  a.kept = mode;
  a.x_in = x_in;
  a.mod = adaln_forward(be, silu_c, heavy, scratch);

  // Attention branch.
  attn_norm(be, a, cheap, scratch);
  a.qkv = heavy.tensor({n, tf, 3 * d / tp}, dt);
  linear_fwd(be, qkv_, a.h1, a.qkv, Bias::Add);
  qk_transform(be, a, cheap);
  a.attn = heavy.tensor({n, tf, d / tp}, dt);
  a.lse = heavy.tensor({n, heads, tf}, DType::F32);
  be.attention_fwd(a.qkv_a, static_cast<int>(heads), a.attn, a.lse);
  a.o1 = heavy.tensor({n, t, d}, dt);
  row_parallel_fwd(be, proj_, a.attn, a.o1, scratch);
  attn_residual(be, a, cheap);

  // MLP branch.
  mlp_norm(be, a, cheap, scratch);
  a.f1 = heavy.tensor({n, tf, f1_width / tp}, dt);
  linear_fwd(be, fc1_, a.h2, a.f1, Bias::Add);
  mlp_act(be, a, cheap);
  a.o2 = heavy.tensor({n, t, d}, dt);
  row_parallel_fwd(be, fc2_, a.g1, a.o2, scratch);
  a.x_out = saved.tensor({n, t, d}, dt);  // always kept: the next block's input
  be.copy(a.x_out, a.x_mid);
  be.gate_residual_fwd(a.x_out, a.o2, {a.mod, kGate2});
  return a;
}

BlockActs DiTBlock::rematerialize(Backend& be, const BlockActs& kept, const Tensor& silu_c, Arena& into,
                                  Arena& scratch) const {
  if (kept.kept == Recompute::Full)
    return forward(be, kept.x_in, silu_c, into, scratch, Recompute::None);
  BlockActs a = kept;
  if (kept.kept == Recompute::Selective) {
    attn_norm(be, a, into, scratch);
    qk_transform(be, a, into);
    attn_residual(be, a, into);
    mlp_norm(be, a, into, scratch);
    mlp_act(be, a, into);
    a.kept = Recompute::None;
  }
  return a;
}

// B and W: with a deferring sink `w` (dit_block.h) the tensors the five linears' weight grads read
// live in the microbatch's arena until W:
//   inputs   h1 (qkv), attn (proj), h2 (fc1 / w12), g1 (fc2 / w3): the forward's, or under
//            recomputation rematerialised into the kept arena (a recomputed block keeps its
//            rematerialised tensors until its W); SiLU(c) (adaLN), the stage's
//   output grads  dL/d o2, df1, dL/d o1 and dqkv, each moved (`keep_for_w`) into the forward
//            tensor it is the gradient of (o2, f1, o1, qkv: same shape, and dead once B has read
//            it), so that a microbatch owing its W holds no more than its forward did; under
//            sequence parallelism dL/d o2 and dL/d o1 are all-gathered over tokens, larger than
//            o2 and o1, and are kept beside them; and this rank's adaLN columns of dmod (per sample)
// Everything else is scratch, gone when B returns. With the default sink everything is scratch
// and each weight grad is added where the fused backward adds it; the values are the same bits.
void DiTBlock::backward(Backend& be, const BlockActs& kept, const Tensor& silu_c, const Tensor& dx,
                        const Tensor& dsilu_c, Arena& scratch, const WeightSink& w) const {
  Arena& keep = w.arena(scratch);
  const BlockActs a = rematerialize(be, kept, silu_c, keep, scratch);
  const std::int64_t n = a.x_in.dim(0), t = a.x_in.dim(1), tf = t * token_split();
  const std::int64_t d = cfg_.hidden_size, tp = tp_->size();
  const std::int64_t heads = cfg_.num_heads / tp;
  const DType dt = be.compute_dtype();
  Tensor dmod = keep.tensor({n, 6 * d}, dt);
  Tensor dbranch = scratch.tensor({n, t, d}, dt);  // grad of a branch output (o2, then o1)
  Tensor dnorm = scratch.tensor({n, tf, d}, dt);   // grad of a modulated norm (h1, h2), tp-partial
  auto linear = [&](const LinearParams& p, const Tensor& x, const Tensor& dy, const Tensor& dxl) {
    w.linear(be, p, x, dy, Bias::Add);
    linear_bwd_input(be, p, dy, dxl, Accumulate::Overwrite);
  };
  // An output grad W reads, once B no longer reads `dead` (the forward tensor it is the grad of).
  auto keep_for_w = [&](const Tensor& grad, const Tensor& dead) {
    if (!w.deferred()) return grad;
    const bool fits = dead.shape == grad.shape && dead.dtype == grad.dtype;
    const Tensor home = fits ? dead : keep.tensor(grad.shape, grad.dtype);
    be.copy(home, grad);
    return home;
  };

  // MLP branch: dx holds dL/dx_out and becomes dL/dx_mid.
  be.gate_residual_bwd(dx, a.o2, {a.mod, kGate2}, dbranch, {dmod, kGate2});
  const Tensor do2 = keep_for_w(row_parallel_dy(be, dbranch, scratch, scratch), a.o2);
  Tensor dg1 = scratch.tensor(a.g1.shape, dt);
  linear(fc2_, a.g1, do2, dg1);
  Tensor df1 = dg1;
  if (cfg_.mlp == MlpKind::Swiglu) {
    df1 = scratch.tensor(a.f1.shape, dt);
    be.swiglu_bwd(a.f1, dg1, df1);
  } else {
    be.gelu_tanh_bwd(a.f1, dg1, dg1);
  }
  df1 = keep_for_w(df1, a.f1);
  linear(fc1_, a.h2, df1, dnorm);
  modulated_norm_bwd(be, column_parallel_dx(be, dnorm, scratch), a.x_mid, a.mean2, a.rstd2, a.mod,
                     kShift2, norm2_, dx, dmod, scratch);

  // Attention branch: dx becomes dL/dx_in.
  be.gate_residual_bwd(dx, a.o1, {a.mod, kGate1}, dbranch, {dmod, kGate1});
  const Tensor do1 = keep_for_w(row_parallel_dy(be, dbranch, scratch, scratch), a.o1);
  Tensor dattn = scratch.tensor({n, tf, d / tp}, dt);
  linear(proj_, a.attn, do1, dattn);
  Tensor dqkv = scratch.tensor({n, tf, 3 * d / tp}, dt);
  Tensor dqkv_a = dqkv;
  if (a.qkv_a.data != a.qkv.data) dqkv_a = scratch.tensor(dqkv.shape, dt);
  be.attention_bwd(a.qkv_a, a.attn, a.lse, dattn, static_cast<int>(heads), dqkv_a);
  if (a.qkv_a.data != a.qkv.data) qk_transform_bwd(be, a, dqkv_a, dqkv, scratch);
  dqkv = keep_for_w(dqkv, a.qkv);
  linear(qkv_, a.h1, dqkv, dnorm);
  modulated_norm_bwd(be, column_parallel_dx(be, dnorm, scratch), a.x_in, a.mean1, a.rstd1, a.mod,
                     kShift1, norm1_, dx, dmod, scratch);

  adaln_backward(be, silu_c, dmod, dsilu_c, scratch, w);
}

}  // namespace dit
