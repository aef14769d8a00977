// Full (global, PyTorch-shaped) tensors assembled from the slices every rank of a layout holds:
// for tests, exports and comparisons across layouts. Every rank gets every tensor.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "layers/dit_stage.h"
#include "parallel/grid.h"

namespace dit {

enum class GatherWhat : unsigned char { Values, Grads };

// name -> global tensor (host fp32) for every parameter of the whole model.
std::map<std::string, std::vector<float>> gather_global(Backend& be, const DiTStage& stage,
                                                        ParallelContext& ctx, GatherWhat what);

}  // namespace dit
