// Forward and backward of a pipeline stage's slice of the DiT.
#include "layers/dit_stage.h"

#include "parallel/sequence_parallel.h"

namespace dit {

std::vector<ParamSpec> DiTStage::declare(const DiTConfig& cfg, const StageLayout& layout) {
  std::vector<ParamSpec> specs;
  if (layout.has_embed) Embedders::declare(cfg, specs);
  for (int b = layout.first_block; b < layout.end_block; ++b) DiTBlock::declare(cfg, b, specs);
  if (layout.has_final) FinalLayer::declare(cfg, specs);
  return specs;
}

std::vector<ParamSpec> DiTStage::declare(const DiTConfig& cfg, const std::vector<StageLayout>& chunks) {
  std::vector<ParamSpec> specs;
  for (const StageLayout& l : chunks)
    for (ParamSpec& s : declare(cfg, l)) specs.push_back(std::move(s));
  return specs;
}

void check_stage_options(const StageOptions& opt, const std::vector<StageLayout>& stages) {
  DIT_CHECK(opt.recompute_blocks >= 0, "recomputing ", opt.recompute_blocks, " blocks per stage: expected 0 (every block) or a positive count");
  if (opt.recompute_blocks == 0) return;
  DIT_CHECK(opt.recompute == Recompute::Full, "recomputing ", opt.recompute_blocks,
            " blocks per stage needs full recomputation (it is \"", recompute_name(opt.recompute), "\")");
  for (std::size_t s = 0; s < stages.size(); ++s) {
    const int blocks = stages[s].end_block - stages[s].first_block;
    DIT_CHECK(opt.recompute_blocks <= blocks, "recomputing ", opt.recompute_blocks, " blocks per stage, but pipeline stage ",
              s, " has only ", blocks, " block", blocks == 1 ? "" : "s");
  }
}

DiTStage::DiTStage(Backend& be, const DiTConfig& cfg, std::vector<StageLayout> chunks, Comm& tp,
                   std::int64_t pad_multiple, StageOptions options)
    : be_(&be), cfg_(cfg), options_(options), tp_(&tp) {
  cfg.validate();
  DIT_CHECK(!chunks.empty(), "a pipeline stage without model chunks");
  for (const StageLayout& layout : chunks)
    DIT_CHECK(0 <= layout.first_block && layout.first_block <= layout.end_block &&
                  layout.end_block <= cfg.depth,
              "stage blocks [", layout.first_block, ", ", layout.end_block,
              ") outside the model's ", cfg.depth, " blocks");
  DIT_CHECK(cfg.num_heads % tp.size() == 0 && cfg.ffn_hidden() % tp.size() == 0 &&
                (6 * cfg.hidden_size) % tp.size() == 0,
            "tp ", tp.size(), " does not divide the model's ", cfg.num_heads, " heads, ", cfg.ffn_hidden(),
            " MLP units and 6 x ", cfg.hidden_size, " adaLN outputs");
  DIT_CHECK(!options.sequence_parallel || (tp.size() > 1 && cfg.num_patches() % tp.size() == 0),
            "sequence parallelism needs tp > 1 dividing the ", cfg.num_patches(),
            " tokens per image (tp = ", tp.size(), ")");
  params_ = std::make_unique<ParamSet>(be, declare(cfg, chunks), tp.size(), tp.rank(), pad_multiple, options.gradients);
  // A unit's range starts at its first tensor; the flat order is declare's: chunk by chunk,
  // embedders, blocks, final layer.
  std::vector<std::size_t> unit_first;  // index of each unit's first tensor
  std::size_t specs = 0;
  const auto add_unit = [&](std::size_t count) {
    unit_first.push_back(specs);
    specs += count;
  };
  for (const StageLayout& layout : chunks) {
    Chunk& c = chunks_.emplace_back();
    c.layout = layout;
    c.first_unit = static_cast<int>(unit_first.size());
    std::vector<ParamSpec> scratch;
    if (layout.has_embed) {
      c.embed = std::make_unique<Embedders>(be, cfg, *params_);
      Embedders::declare(cfg, scratch);
      add_unit(scratch.size());
    }
    for (int b = layout.first_block; b < layout.end_block; ++b) {
      c.blocks.emplace_back(cfg, *params_, b, tp,
                            options.sequence_parallel ? Tokens::SequenceParallel : Tokens::Replicated);
      scratch.clear();
      DiTBlock::declare(cfg, b, scratch);
      add_unit(scratch.size());
    }
    if (layout.has_final) {
      c.final = std::make_unique<FinalLayer>(cfg, *params_);
      scratch.clear();
      FinalLayer::declare(cfg, scratch);
      add_unit(scratch.size());
    }
  }
  DIT_CHECK(specs == params_->size(), "stage units: ", specs, " tensors counted of ", params_->size());
  for (std::size_t u = 0; u < unit_first.size(); ++u) {
    const std::int64_t begin = u == 0 ? 0 : params_->offset(static_cast<int>(unit_first[u]));
    const std::int64_t end =
        u + 1 < unit_first.size() ? params_->offset(static_cast<int>(unit_first[u + 1])) : params_->padded_numel();
    units_.push_back({begin, end});
  }
}

void DiTStage::gradients_final(int chunk) const {
  if (!residency_) return;
  const Chunk& ch = chunks_.at(chunk);
  for (int u = ch.first_unit; u < ch.end_unit(); ++u) residency_->gradients_final(u);
}

void DiTStage::attach_lora(const ParamSet& lora, float scale, const Tensor& t, const Tensor& u) {
  for (Chunk& c : chunks_)
    for (DiTBlock& b : c.blocks) b.attach_lora(lora, scale, t, u);
}

std::vector<StageLayout> DiTStage::layouts() const {
  std::vector<StageLayout> out;
  for (const Chunk& c : chunks_) out.push_back(c.layout);
  return out;
}

std::int64_t DiTStage::local_tokens() const {
  return cfg_.num_patches() / (options_.sequence_parallel ? tp_->size() : 1);
}

namespace {

// Row n of a (N, ...) tensor.
Tensor sample_row(const Tensor& t, std::int64_t n) { return t.view({t.dim(0), t.numel() / t.dim(0)}).rows(n, 1); }

}  // namespace

// x_out = m block(x) + (1 - m) x per sample; block(x) is kept for the gradient of m. A hard mask
// takes either tensor's row unchanged.
void DiTStage::gate_block(const float* mask, BlockActs& b, std::vector<Tensor>& ungated, Arena& saved) const {
  Backend& be = *be_;
  const Tensor out = b.x_out;
  const Tensor gated = saved.tensor(out.shape, out.dtype);
  for (std::int64_t n = 0; n < out.dim(0); ++n) {
    const float m = mask[n];
    const Tensor dst = sample_row(gated, n);
    be.copy(dst, sample_row(m == 0.f ? b.x_in : out, n));
    if (m == 0.f || m == 1.f) continue;
    be.scale(dst, m);
    be.axpy(1.f - m, sample_row(b.x_in, n), dst);
  }
  ungated.push_back(out);
  b.x_out = gated;
}

// dL/dm = sum (dL/dx_out)(block(x) - x) into gate.dmask; dx becomes m dL/dx_out (the block's
// share); returns (1 - m) dL/dx_out (the skip's), or nothing when every sample keeps the block.
Tensor DiTStage::gate_backward(const BlockGate& gate, const Tensor& x_in, const Tensor& ungated, const Tensor& dx,
                               Arena& scratch) const {
  Backend& be = *be_;
  const std::int64_t n = dx.dim(0), per = dx.numel() / n;
  const Tensor delta = scratch.tensor(dx.shape, dx.dtype);
  be.copy(delta, ungated);
  be.axpy(-1.f, x_in, delta);
  be.row_dot(dx.view({n, per}), delta.view({n, per}), gate.dmask);
  bool all_kept = true;
  for (std::int64_t i = 0; i < n; ++i) all_kept = all_kept && gate.mask[i] == 1.f;
  if (all_kept) return {};
  const Tensor skip = scratch.tensor(dx.shape, dx.dtype);
  be.copy(skip, dx);
  for (std::int64_t i = 0; i < n; ++i) {
    const float m = gate.mask[i];
    if (m != 1.f) be.scale(sample_row(dx, i), m);
    if (m != 0.f) be.scale(sample_row(skip, i), 1.f - m);
  }
  return skip;
}

StageActs DiTStage::forward(const StageInputs& in, Arena& saved, Arena& scratch, int chunk) const {
  Backend& be = *be_;
  const Chunk& ch = chunks_.at(chunk);
  StageActs a;
  const DType dt = be.compute_dtype();
  const bool sp = options_.sequence_parallel;
  using Pass = UnitResidency::Pass;
  if (ch.embed) {
    enter(ch, ch.first_unit, Pass::Forward);
    a.embed = ch.embed->forward(be, in.images, in.t, in.ids, saved);
    leave(ch.first_unit, Pass::Forward);
    a.x_in = a.embed.x0;
    a.c = a.embed.c;
    if (sp) {
      a.x_in = saved.tensor({a.c.dim(0), local_tokens(), cfg_.hidden_size}, dt);
      const Arena::Mark m = scratch.mark();
      split_tokens(*tp_, be, a.embed.x0, a.x_in, scratch);
      scratch.rewind(m);
    }
  } else {
    a.x_in = in.x;
    a.c = in.c;
  }
  a.silu_c = saved.tensor(a.c.shape, dt);
  be.silu_fwd(a.c, a.silu_c);
  Tensor x = a.x_in;
  DIT_CHECK(in.gates.empty() || in.gates.size() == ch.blocks.size(), "stage forward: ", in.gates.size(),
            " block gates for ", ch.blocks.size(), " blocks");
  a.gates = in.gates;
  for (std::size_t i = 0; i < ch.blocks.size(); ++i) {
    const Arena::Mark m = scratch.mark();
    enter(ch, ch.block_unit(i), Pass::Forward);
    a.blocks.push_back(ch.blocks[i].forward(be, x, a.silu_c, saved, scratch,
                                            options_.mode_of(static_cast<int>(i))));
    leave(ch.block_unit(i), Pass::Forward);
    scratch.rewind(m);
    if (!a.gates.empty()) gate_block(a.gates[i].mask, a.blocks.back(), a.ungated, saved);
    x = a.blocks.back().x_out;
  }
  if (ch.final) {
    const Arena::Mark m = scratch.mark();
    if (sp) {  // the final layer sees every token
      const Tensor all = saved.tensor({x.dim(0), cfg_.num_patches(), cfg_.hidden_size}, dt);
      gather_tokens(*tp_, be, x, all, scratch);
      x = all;
    }
    enter(ch, ch.final_unit(), Pass::Forward);
    a.final = ch.final->forward(be, x, a.silu_c, saved, scratch);
    leave(ch.final_unit(), Pass::Forward);
    scratch.rewind(m);
  }
  return a;
}

void DiTStage::backward(const StageActs& a, StageGrads& g, Arena& scratch, int chunk, const WeightSink& w) const {
  Backend& be = *be_;
  const Chunk& ch = chunks_.at(chunk);
  const DType dt = be.compute_dtype();
  using Pass = UnitResidency::Pass;
  const bool final_grads = g.last && !w.deferred();  // each unit's gradients are complete after its backward
  Tensor dsilu_final;
  if (ch.final) {
    enter(ch, ch.final_unit(), Pass::Backward);
    DIT_CHECK(g.dx.shape == a.x_out().shape && g.dc.shape == a.c.shape,
              "last stage backward: dx/dc buffers of shapes ", a.x_out().shape.str(), " and ",
              a.c.shape.str(), " are needed");
    be.fill(g.dc, 0.f);
    dsilu_final = scratch.tensor(a.c.shape, dt);
    const Arena::Mark m = scratch.mark();
    if (options_.sequence_parallel) {  // dx of every token, identical on the tp ranks: keep ours
      const Tensor all = scratch.tensor(a.final.x_in.shape, dt);
      ch.final->backward(be, a.final, a.silu_c, g.dout, all, dsilu_final, scratch, w);
      split_tokens(*tp_, be, all, g.dx, scratch);
    } else {
      ch.final->backward(be, a.final, a.silu_c, g.dout, g.dx, dsilu_final, scratch, w);
    }
    leave(ch.final_unit(), Pass::Backward, final_grads);
    scratch.rewind(m);
  }
  // Blocks add their tp-partial dL/dSiLU(c) here; one all-reduce per microbatch completes it.
  Tensor dsilu = scratch.tensor(a.c.shape, dt);
  be.fill(dsilu, 0.f);
  for (std::size_t i = ch.blocks.size(); i-- > 0;) {
    const Arena::Mark m = scratch.mark();
    for (const BlockGrad& bg : g.block_grads)
      if (bg.block == static_cast<int>(i)) be.axpy(1.f, bg.dx, g.dx);
    Tensor skip;  // gated: (1 - m) dL/dx_out, the gradient that bypasses the block
    if (!a.gates.empty()) skip = gate_backward(a.gates[i], a.blocks[i].x_in, a.ungated[i], g.dx, scratch);
    enter(ch, ch.block_unit(i), Pass::Backward);
    ch.blocks[i].backward(be, a.blocks[i], a.silu_c, g.dx, dsilu, scratch, w);
    leave(ch.block_unit(i), Pass::Backward, final_grads);
    if (skip.data) be.axpy(1.f, skip, g.dx);
    scratch.rewind(m);
  }
  tp_->all_reduce_sum(dsilu);
  if (ch.final) be.axpy(1.f, dsilu_final, dsilu);  // replicated over tp: added after the reduce
  be.silu_bwd(a.c, dsilu, g.dc, Accumulate::Add);
  if (!ch.embed) return;
  Tensor dx0 = g.dx;
  if (options_.sequence_parallel) {  // the patch embedding's grad needs every token's
    dx0 = w.arena(scratch).tensor(a.embed.x0.shape, dt);
    gather_tokens(*tp_, be, g.dx, dx0, scratch);
  }
  enter(ch, ch.first_unit, Pass::Backward);
  ch.embed->backward(be, a.embed, dx0, g.dc, g.dimages, scratch, w);
  leave(ch.first_unit, Pass::Backward, final_grads);
}

}  // namespace dit
