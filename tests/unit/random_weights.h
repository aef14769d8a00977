// Every tensor of a whole DiT drawn from Philox (distinct values in every tensor), as a weights
// file holds them: the tests of pruning and of gated blocks save, prune and load these.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/philox.h"
#include "layers/dit_stage.h"

namespace dit {

inline std::map<std::string, std::vector<float>> random_tensors(const DiTConfig& cfg, std::uint64_t seed,
                                                                float scale = 0.1f) {
  std::map<std::string, std::vector<float>> out;
  std::uint64_t index = 0;
  for (const ParamSpec& s : DiTStage::declare(cfg, StageLayout::whole(cfg))) {
    Philox rng(seed, RngPurpose::Test, 0, index++);
    std::vector<float> v(static_cast<std::size_t>(s.global.numel()));
    for (float& x : v) x = scale * rng.normal();
    out[s.name] = std::move(v);
  }
  return out;
}

}  // namespace dit
