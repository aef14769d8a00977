// The CUDA backend's scratch for one convolution (backend/cuda/image_ops.cu), which the planning
// backend (backend/virtual) counts as its own: the im2col patches of one image (C kh kw x Ho Wo of
// the input's type), and, when a 16-bit output accumulates into what it holds with a bias, the
// fp32 product of one image (K x Ho Wo), so that the sum is rounded to 16 bits once.
#pragma once

#include <cstddef>

#include "backend/backend.h"

namespace dit {

struct ConvScratch {
  std::size_t patches = 0;        // bytes of the im2col patches, at offset 0
  std::size_t product_at = 0;     // where the fp32 product starts (256-byte aligned)
  std::size_t product = 0;        // its bytes (0: the GEMM writes y itself)
  std::size_t total() const { return product == 0 ? patches : product_at + product; }
};

inline ConvScratch conv_scratch(const ConvShape& s, DType dtype, bool bias, Accumulate acc) {
  ConvScratch c;
  c.patches = static_cast<std::size_t>(s.c * s.kh * s.kw * s.oh * s.ow) * dtype_size(dtype);
  if (bias && acc == Accumulate::Add && dtype != DType::F32) {
    c.product_at = (c.patches + 255) / 256 * 256;
    c.product = static_cast<std::size_t>(s.k * s.oh * s.ow) * sizeof(float);
  }
  return c;
}

}  // namespace dit
