// DiT stages under the pipeline executor (see dit_pipeline.h).
#include "engine/dit_pipeline.h"

#include <algorithm>
#include <numeric>
#include <sstream>

namespace dit {

void upload_stage_inputs(Backend& be, const DiTConfig& cfg, std::int64_t n, const HostInputs& host, StageInputs& in,
                         Arena& arena) {
  auto put = [&](const void* src, DType host_dtype, Shape shape, DType dtype) {
    Tensor t = arena.tensor(shape, dtype);
    be.copy(t, Tensor{const_cast<void*>(src), host_dtype, shape, Device::Host});
    return t;
  };
  if (host.images)
    in.images = put(host.images, DType::F32, {n, cfg.in_channels, cfg.input_size, cfg.input_size}, be.compute_dtype());
  in.t = put(host.t, DType::F32, {n}, DType::F32);  // timesteps stay fp32 (bf16 would round 999 to 1000)
  in.ids = put(host.labels, DType::I32, {n}, DType::I32);
}

std::vector<StageLayout> partition_chunks(const DiTConfig& cfg, int pp, int v, const std::vector<int>& layers) {
  DIT_CHECK(pp >= 1, pp, " pipeline stages: expected at least 1");
  DIT_CHECK(v >= 1, v, " model chunks per rank: expected at least 1");
  const int n = pp * v;  // model chunks
  if (v == 1)
    DIT_CHECK(pp <= cfg.depth, "pp = ", pp, " pipeline stages for a model of depth ",
              cfg.depth, ": every stage needs at least one block, so pp <= ", cfg.depth);
  else
    DIT_CHECK(n <= cfg.depth, "pp x virtual stages = ", pp, " x ", v, " = ", n,
              " model chunks for a model of depth ", cfg.depth,
              ": every chunk needs at least one block, so pp x virtual stages <= ", cfg.depth);
  std::vector<int> counts = layers;
  if (counts.empty()) {  // 64-bit: (s + 1) * depth overflows an int for deep models
    const std::int64_t d = cfg.depth;
    for (std::int64_t s = 0; s < n; ++s) counts.push_back(static_cast<int>((s + 1) * d / n - s * d / n));
  }
  std::ostringstream os;
  for (int c : counts) os << (os.tellp() > 0 ? "," : "") << c;
  DIT_CHECK(static_cast<int>(counts.size()) == n, "the stage split ", os.str(), " has ",
            counts.size(), " entries for ", n, v == 1 ? " pipeline stages" : " model chunks (pp x virtual stages)");
  const std::int64_t sum = std::accumulate(counts.begin(), counts.end(), std::int64_t{0});
  DIT_CHECK(sum == cfg.depth, "the stage split ", os.str(), " sums to ", sum,
            " blocks, the model has ", cfg.depth);
  std::vector<StageLayout> out;
  int first = 0;
  for (int s = 0; s < n; ++s) {
    DIT_CHECK(counts[s] >= 1, "the stage split ", os.str(), ": ", v == 1 ? "stage " : "model chunk ",
              s, " has no block");
    out.push_back({first, first + counts[s], s == 0, s == n - 1});
    first += counts[s];
  }
  return out;
}

std::vector<StageLayout> partition_stages(const DiTConfig& cfg, int pp, const std::vector<int>& layers) {
  return partition_chunks(cfg, pp, 1, layers);
}

std::vector<StageLayout> chunks_of_stage(const std::vector<StageLayout>& model_chunks, int pp, int stage,
                                         ChunkPlacement placement) {
  DIT_CHECK(pp >= 1 && model_chunks.size() % pp == 0 && stage >= 0 && stage < pp,
            "chunks of stage ", stage, " of ", pp, " from ", model_chunks.size(), " model chunks");
  const int v = static_cast<int>(model_chunks.size()) / pp;
  DIT_CHECK(placement == ChunkPlacement::Interleaved || v == 2, "a V placement (zb-v) needs 2 chunks per rank, got ", v);
  std::vector<StageLayout> out;
  for (int c = 0; c < v; ++c) out.push_back(model_chunks[model_chunk(pp, stage, c, placement)]);
  return out;
}

DiTPipelineStage::DiTPipelineStage(Backend& be, const DiTStage& stage, std::int64_t micro_batch,
                                   DiTPipelineHooks hooks, StageCompanion* companion)
    : be_(&be), stage_(&stage), n_(micro_batch), hooks_(std::move(hooks)), scratch_(be), companion_(companion) {}

Shape DiTPipelineStage::x_shape() const {
  const DiTConfig& c = stage_->config();
  return {n_, stage_->local_tokens(), c.hidden_size};
}
Shape DiTPipelineStage::c_shape() const { return {n_, stage_->config().hidden_size}; }

std::vector<Tensor> DiTPipelineStage::forward_inputs(int mb, int chunk, Arena& arena) {
  if (stage_->layout(chunk).has_embed) return {};
  const DType dt = be_->compute_dtype();
  std::vector<Tensor> in = {arena.tensor(x_shape(), dt), arena.tensor(c_shape(), dt)};
  if (companion_)
    for (Tensor& t : companion_->forward_inputs(mb, chunk, n_, arena)) in.push_back(t);
  return in;
}

std::vector<Tensor> DiTPipelineStage::forward(int mb, int chunk, const std::vector<Tensor>& inputs,
                                              Arena& arena) {
  scratch_.reset();
  StageInputs in;
  const StageLayout& layout = stage_->layout(chunk);
  if (layout.has_embed) {
    hooks_.make_inputs(mb, in, arena);
  } else {
    in.x = inputs.at(0);
    in.c = inputs.at(1);
  }
  if (hooks_.block_gates) in.gates = hooks_.block_gates(mb, chunk);
  StageActs& a = acts_[{chunk, mb}] = stage_->forward(in, arena, scratch_, chunk);
  StageCompanion::Output side;
  if (companion_) {
    side = companion_->forward(mb, chunk, in, {inputs.begin() + std::min<std::size_t>(2, inputs.size()), inputs.end()},
                               a, arena, scratch_);
    if (!side.block_grads.empty()) block_grads_[{chunk, mb}] = std::move(side.block_grads);
  }
  if (layout.has_final) {
    if (companion_ && hooks_.on_companion_output) hooks_.on_companion_output(mb, side.out);
    douts_[mb] = hooks_.on_output(mb, a.final.out, arena);
    if (!douts_[mb].data) {  // forward only: nothing is kept for a backward
      acts_.erase({chunk, mb});
      douts_.erase(mb);
    }
    return {};
  }
  std::vector<Tensor> out = {a.x_out(), a.c};
  out.insert(out.end(), side.send.begin(), side.send.end());
  return out;
}

std::vector<Tensor> DiTPipelineStage::backward_inputs(int, int chunk, Arena& arena) {
  if (stage_->layout(chunk).has_final) return {};
  const DType dt = be_->compute_dtype();
  return {arena.tensor(x_shape(), dt), arena.tensor(c_shape(), dt)};
}

std::vector<Tensor> DiTPipelineStage::backward(int mb, int chunk, const std::vector<Tensor>& grads,
                                               Arena& arena) {
  return run_backward(mb, chunk, grads, arena, WeightSink{});
}

std::vector<Tensor> DiTPipelineStage::backward_input(int mb, int chunk, const std::vector<Tensor>& grads,
                                                     Arena& arena) {
  std::vector<WeightGrad>& owed = owed_[{chunk, mb}];
  DIT_CHECK(owed.empty(), "pipeline stage: input backward of microbatch ", mb, " twice before its weight backward");
  return run_backward(mb, chunk, grads, arena, WeightSink(owed, arena));
}

void DiTPipelineStage::backward_weight(int mb, int chunk, Arena&) {
  auto it = owed_.find({chunk, mb});
  DIT_CHECK(it != owed_.end(), "pipeline stage: weight backward of microbatch ", mb, " without its input backward");
  run_weight_grads(*be_, it->second);
  owed_.erase(it);
  if (++weights_[chunk] == microbatches_) stage_->gradients_final(chunk);
}

std::vector<Tensor> DiTPipelineStage::run_backward(int mb, int chunk, const std::vector<Tensor>& grads, Arena& arena,
                                                   const WeightSink& w) {
  scratch_.reset();
  const StageLayout& layout = stage_->layout(chunk);
  auto it = acts_.find({chunk, mb});
  DIT_CHECK(it != acts_.end(), "pipeline stage: backward of microbatch ", mb, " without its forward");
  StageGrads g;
  const DType dt = be_->compute_dtype();
  if (layout.has_final) {
    g.dout = douts_.at(mb);
    g.dx = arena.tensor(x_shape(), dt);
    g.dc = arena.tensor(c_shape(), dt);
  } else {
    g.dx = grads.at(0);
    g.dc = grads.at(1);
  }
  const bool want_dimages = layout.has_embed && hooks_.on_input_grad;
  if (want_dimages) g.dimages = arena.tensor(it->second.embed.images.shape, dt);
  if (auto extra = block_grads_.find({chunk, mb}); extra != block_grads_.end()) {
    g.block_grads = std::move(extra->second);
    block_grads_.erase(extra);
  }
  g.last = ++backwards_[chunk] == microbatches_;
  stage_->backward(it->second, g, scratch_, chunk, w);
  acts_.erase(it);
  if (layout.has_final) douts_.erase(mb);
  if (layout.has_embed) {
    if (want_dimages) hooks_.on_input_grad(mb, g.dimages);
    return {};
  }
  return {g.dx, g.dc};
}

}  // namespace dit
