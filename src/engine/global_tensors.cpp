// Assembling global tensors from tp/pp/dp pieces (see gather.h).
#include "engine/global_tensors.h"

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

}  // namespace dit
