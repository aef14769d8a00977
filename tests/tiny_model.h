// The small DiT the training tests use: 8x8 inputs, patch 2 (16 tokens), hidden 32. Trains a
// step in milliseconds on one core.
#pragma once

#include "layers/dit_config.h"

namespace dit {

inline DiTConfig tiny_dit(int in_channels, int depth, int num_heads, int num_classes) {
  DiTConfig c;
  c.input_size = 8;
  c.patch_size = 2;
  c.in_channels = in_channels;
  c.hidden_size = 32;
  c.depth = depth;
  c.num_heads = num_heads;
  c.num_classes = num_classes;
  return c;
}

}  // namespace dit
