// Assembling global tensors from tp/pp/dp pieces (see gather.h).
#include "engine/global_tensors.h"

#include <algorithm>

namespace dit {

std::vector<float> host_copy(Backend& be, const Tensor& t) {
  std::vector<float> v(static_cast<std::size_t>(t.numel()));
  be.copy(Tensor{v.data(), DType::F32, t.shape, Device::Host}, t);
  return v;
}

std::map<std::string, std::vector<float>> gather_global(const DiTStage& stage, ParallelContext& ctx,
                                                        const std::vector<float>& flat, int root) {
  const DiTConfig& cfg = stage.config();
  const ParamSet& ps = stage.params();
  DIT_CHECK(static_cast<std::int64_t>(flat.size()) == ps.padded_numel(), "gather_global: a flat buffer of ",
            flat.size(), " values for a stage of ", ps.padded_numel());
  std::map<std::string, std::vector<float>> out;
  for (const ParamSpec& spec : DiTStage::declare(cfg, StageLayout::whole(cfg))) {
    std::vector<float> full(static_cast<std::size_t>(spec.global.numel()), 0.f);
    const int i = ps.index(spec.name);
    const bool owner = i >= 0 && ctx.coord.dp == 0 &&
                       (spec.split != Split::Replicated || ctx.coord.tp == 0);
    if (owner) spec.unslice(flat.data() + ps.offset(i), full.data(), ps.tp(), ps.tp_rank());
    ctx.world->all_reduce_sum(Tensor{full.data(), DType::F32, {spec.global.numel()}, Device::Host});
    if (root < 0 || ctx.world_rank == root) out.emplace(spec.name, std::move(full));
  }
  return out;
}

std::vector<float> gather_shards(Backend& be, const ZeroOptimizer& zero, const Tensor& shard,
                                 ParallelContext& ctx) {
  std::vector<float> mine = host_copy(be, shard);
  std::vector<float> full(mine.size() * static_cast<std::size_t>(ctx.dp->size()));
  ctx.dp->all_gather(Tensor{mine.data(), DType::F32, {zero.shard_size()}, Device::Host},
                     Tensor{full.data(), DType::F32, {static_cast<std::int64_t>(full.size())}, Device::Host});
  return full;
}

std::vector<float> gather_range(Backend& be, const ZeroOptimizer& zero, const Tensor& shard, ParallelContext& ctx,
                                const std::function<FlatRange(int)>& want_of) {
  constexpr int kTag = 41;  // on the dp communicator, beside nothing else in flight (the step is settled)
  Comm& dp = *ctx.dp;
  const int me = dp.rank(), n = dp.size();
  const std::int64_t padded = zero.shard_size() * n;
  const FlatRange mine = ZeroOptimizer::shard_range(padded, n, me), want = want_of(me);
  const auto meet = [](FlatRange a, FlatRange b) {
    return FlatRange{std::max(a.begin, b.begin), std::max(std::max(a.begin, b.begin), std::min(a.end, b.end))};
  };
  const auto host = [](const float* p, std::int64_t count) {
    return Tensor{const_cast<float*>(p), DType::F32, {count}, Device::Host};
  };
  // The shard read where it is when in host memory (the CPU backend, offload), else copied there.
  std::vector<float> copied;
  const bool on_host = shard.device == Device::Host && shard.dtype == DType::F32;
  if (!on_host) copied = host_copy(be, shard);
  const float* own = on_host ? shard.f32() : copied.data();
  std::vector<float> out(static_cast<std::size_t>(want.size()));
  std::vector<Request> requests;
  for (int q = 0; q < n; ++q) {
    const FlatRange in = meet(ZeroOptimizer::shard_range(padded, n, q), want);  // what q sends me
    if (q == me) {
      std::copy(own + (in.begin - mine.begin), own + (in.end - mine.begin), out.begin() + (in.begin - want.begin));
      continue;
    }
    if (in.size() > 0) requests.push_back(dp.irecv(host(out.data() + (in.begin - want.begin), in.size()), q, kTag));
    const FlatRange sent = meet(mine, want_of(q));
    if (sent.size() > 0) requests.push_back(dp.isend(host(own + (sent.begin - mine.begin), sent.size()), q, kTag));
  }
  for (Request& r : requests) dp.wait(r);
  return out;
}

}  // namespace dit
