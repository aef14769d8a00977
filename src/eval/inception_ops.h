// The host NCHW float32 operations Inception-V3 needs beyond convolution (conv.h): the bilinear
// resize of its input to 299 x 299, the "same"-padded 3x3 stride-1 pools of its Inception blocks,
// and channel concatenation. Each matches PyTorch's definition (see the comments), since the FID
// network's features must agree with the reference implementations to float rounding.
#pragma once

#include <cstdint>
#include <vector>

namespace dit::eval {

// A batch of feature maps.
struct FeatureMaps {
  int n = 0, c = 0, h = 0, w = 0;
  std::vector<float> v;  // (n, c, h, w)
  FeatureMaps() = default;
  FeatureMaps(int n_, int c_, int h_, int w_) : n(n_), c(c_), h(h_), w(w_), v(std::size_t(n_) * c_ * h_ * w_) {}
  std::int64_t plane() const { return std::int64_t(h) * w; }
};

// Bilinear resize of (n, c, h, w) to (n, c, oh, ow) as F.interpolate(mode="bilinear",
// align_corners=False, antialias=False): source coordinate (dst + 0.5) * in / out - 0.5, clamped
// at 0, in float.
FeatureMaps resize_bilinear(const FeatureMaps& x, int oh, int ow);

// 3x3 windows, stride 1, one pixel of padding, so the map keeps its size. The average counts only
// the in-image pixels (count_include_pad=False, TensorFlow's behaviour); the maximum ignores the
// padding (PyTorch pads max pools with -inf).
enum class Pool3x3 { AverageExcludingPadding, Max };
FeatureMaps pool3x3_same(const FeatureMaps& x, Pool3x3 kind);

// max(x, 0) in place.
void relu_inplace(FeatureMaps& x);

// The parts stacked along channels (all with the same n, h, w): torch.cat(parts, 1).
FeatureMaps concat_channels(const std::vector<const FeatureMaps*>& parts);

}  // namespace dit::eval
