// 2-D convolution and pooling on host float32 NCHW batches, for the evaluation classifier (the
// Fashion-MNIST network of classifier.h; Inception-V3 runs on a Backend instead). Convolution is
// im2col + the fixed-order GEMM (backend/cpu/ordered_gemm.h: threaded, the same bits at any thread
// count on any CPU), so the classifier trains to the same weights anywhere; the backward pass is
// what it trains with.
#pragma once

#include <cstdint>
#include <vector>

namespace dit::eval {

// A convolution of a (n, c, h, w) input with a (k, c, kh, kw) weight, stride (sh, sw) and zero
// padding (ph, pw) on each side: output (n, k, oh, ow).
struct ConvShape {
  int n = 1, c = 1, h = 1, w = 1;
  int k = 1, kh = 1, kw = 1;
  int sh = 1, sw = 1, ph = 0, pw = 0;
  int oh() const { return (h + 2 * ph - kh) / sh + 1; }
  int ow() const { return (w + 2 * pw - kw) / sw + 1; }
  std::int64_t in_size() const { return std::int64_t(n) * c * h * w; }
  std::int64_t out_size() const { return std::int64_t(n) * k * oh() * ow(); }
  std::int64_t weight_size() const { return std::int64_t(k) * c * kh * kw; }
};

// y = conv(x, weight) + bias (bias may be null).
void conv2d_forward(const ConvShape& s, const float* x, const float* weight, const float* bias, float* y);

// Gradients of conv2d_forward: dweight and dbias (may be null) are overwritten; dx (may be null:
// the first layer needs none) is overwritten.
void conv2d_backward(const ConvShape& s, const float* x, const float* weight, const float* dy, float* dx,
                     float* dweight, float* dbias);

// Max pooling over k x k windows with stride `stride`, no padding: (n, c, h, w) -> (n, c, oh, ow)
// with oh = (h - k) / stride + 1. `argmax` (may be null) records each output's input index for
// the backward pass.
struct PoolShape {
  int n = 1, c = 1, h = 1, w = 1, k = 2, stride = 2;
  int oh() const { return (h - k) / stride + 1; }
  int ow() const { return (w - k) / stride + 1; }
  std::int64_t out_size() const { return std::int64_t(n) * c * oh() * ow(); }
};
void max_pool2d_forward(const PoolShape& s, const float* x, float* y, std::int32_t* argmax);
// dx (n, c, h, w) is overwritten: each dy lands on its window's maximum.
void max_pool2d_backward(const PoolShape& s, const float* dy, const std::int32_t* argmax, float* dx);

}  // namespace dit::eval
