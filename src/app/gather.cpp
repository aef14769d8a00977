// Assembling global tensors from tp/pp slices (see gather.h). Each element has exactly one owner
// (dp rank 0; tp rank 0 for replicated tensors); a world all-reduce of zero-filled buffers
// completes every tensor on every rank.
#include "app/gather.h"

namespace dit {

std::map<std::string, std::vector<float>> gather_global(Backend& be, const DiTStage& stage,
                                                        ParallelContext& ctx, GatherWhat what) {
  const DiTConfig& cfg = stage.config();
  const ParamSet& ps = stage.params();
  std::map<std::string, std::vector<float>> out;
  for (const ParamSpec& spec : DiTStage::declare(cfg, StageLayout::whole(cfg))) {
    std::vector<float> full(static_cast<std::size_t>(spec.global.numel()), 0.f);
    const int i = ps.index(spec.name);
    const bool owner = i >= 0 && ctx.coord.dp == 0 &&
                       (spec.split != Split::Replicated || ctx.coord.tp == 0);
    if (owner) {
      const std::vector<float> local = what == GatherWhat::Values ? ps.value_host(i) : ps.grad_host(i);
      spec.unslice(local.data(), full.data(), ps.tp(), ps.tp_rank());
    }
    ctx.world->all_reduce_sum(Tensor{full.data(), DType::F32, {spec.global.numel()}, Device::Host});
    out.emplace(spec.name, std::move(full));
  }
  return out;
}

}  // namespace dit
