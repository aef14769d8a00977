// Full (global, PyTorch-shaped) tensors assembled from the slices every rank of a layout holds:
// for tests, verification and exports (every rank gets every tensor, or one rank alone), and the
// parts of ZeRO-sharded state a rank needs.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "layers/dit_stage.h"
#include "optim/zero.h"
#include "parallel/grid.h"

namespace dit {

// A backend tensor copied to the host as fp32.
std::vector<float> host_copy(Backend& be, const Tensor& t);

// name -> global tensor for every parameter of the whole model, from each rank's flat buffer
// `flat` (its stage's layout, padded size). Owners: dp rank 0, and tp rank 0 for tensors
// replicated over tp; a world all-reduce completes each tensor in turn on every rank. With
// `root` >= 0 only that world rank keeps them: the others return nothing and hold one at a time.
std::map<std::string, std::vector<float>> gather_global(const DiTStage& stage, ParallelContext& ctx,
                                                        const std::vector<float>& flat, int root = -1);

// The stage's full flat buffer of a ZeRO-sharded state (e.g. the EMA), all-gathered over dp.
std::vector<float> gather_shards(Backend& be, const ZeroOptimizer& zero, const Tensor& shard,
                                 ParallelContext& ctx);

// Flat elements want_of(r) of a ZeRO-sharded state to each dp rank r (collective over ctx.dp; every
// rank passes the same rule): the parts of its own shard each other rank asks for are sent to it,
// the rest of its own range received. Holds that range and, unless the shard is in host memory
// already, a host copy of it: not the stage.
std::vector<float> gather_range(Backend& be, const ZeroOptimizer& zero, const Tensor& shard, ParallelContext& ctx,
                                const std::function<FlatRange(int)>& want_of);

}  // namespace dit
