// The rank map printed once at start (rank 0): every rank's node, the GPU or CPU cores it runs on
// and its tp/pp/dp coordinate, so a bad placement (a tp group split over two nodes, ranks sharing
// cores or a GPU) is visible before hours are spent. Tensor parallelism is the chattiest axis and
// the rank grid numbers tp fastest, so a tp group is consecutive ranks: placed on one node
// whenever each node runs a multiple of tp consecutive ranks (srun's and mpirun's block default).
#pragma once

#include <string>
#include <vector>

#include "parallel/grid.h"

namespace dit {

struct RankPlace {
  std::string host;   // the node's hostname
  std::string where;  // "cuda:3" or "cores 0-7"
};

// The table for places gathered from every rank (index = world rank): one line per rank, then a
// warning per tp group that spans nodes and, with GPUs, a note per GPU that several ranks share.
std::string format_rank_map(const Layout& layout, const std::vector<RankPlace>& places, bool gpus);

// Collective over ctx.world. `device` is this rank's GPU ("cuda:0") or "" on the CPU backend (then
// the cores it may run on are shown). With GPUs, a line gives the driver, runtime, cuBLASLt, cuDNN
// and NCCL versions as loaded, and a warning line names each one older than the build needs. Returns the table on rank 0 (one line per rank, then a
// warning line per tp group that spans nodes), "" elsewhere.
std::string rank_map(const ParallelContext& ctx, const std::string& device);

}  // namespace dit
