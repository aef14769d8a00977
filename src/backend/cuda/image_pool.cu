// CUDA backend: the image primitives of the FID Inception-V3 beside the VAE's (image_ops.cu).
// Pooling and the bilinear resize are one thread per output value (a window sum in fp32, the taps
// from math.h's bilinear_tap, as on the CPU); the channel copy is one strided 2-D memcpy.
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_backend.h"

namespace dit {

using cuda::from_f32;
using cuda::i64;
using cuda::to_f32;

namespace {

// y (planes, oh, ow) from x (planes, h, w): each output's window, clipped to the image.
template <typename T>
__global__ void pool2d_kernel(const T* x, T* y, i64 h, i64 w, i64 oh, i64 ow, PoolGeometry g, PoolKind kind,
                              i64 n) {
  for (i64 i = cuda::global_thread(); i < n; i += cuda::grid_stride()) {
    const i64 ox = i % ow, oy = (i / ow) % oh, p = i / (oh * ow);
    const i64 top = oy * g.stride_h - g.pad_top, left = ox * g.stride_w - g.pad_left;
    const i64 y0 = top > 0 ? top : 0, y1 = top + g.kh < h ? top + g.kh : h;
    const i64 x0 = left > 0 ? left : 0, x1 = left + g.kw < w ? left + g.kw : w;
    const T* plane = x + p * h * w;
    float sum = 0.f, best = -INFINITY;
    for (i64 a = y0; a < y1; ++a)
      for (i64 b = x0; b < x1; ++b) {
        const float v = to_f32(plane[a * w + b]);
        sum += v;
        best = v > best ? v : best;
      }
    const float count = kind == PoolKind::AverageExcludingPadding ? static_cast<float>((y1 - y0) * (x1 - x0))
                                                                   : static_cast<float>(g.kh * g.kw);
    y[i] = from_f32<T>(kind == PoolKind::Max ? best : sum / count);
  }
}

template <typename T>
__global__ void resize_bilinear_kernel(const T* x, T* y, int h, int w, int oh, int ow, i64 n) {
  for (i64 i = cuda::global_thread(); i < n; i += cuda::grid_stride()) {
    const int ox = static_cast<int>(i % ow), oy = static_cast<int>((i / ow) % oh);
    const i64 p = i / (static_cast<i64>(oh) * ow);
    const math::BilinearTap v = math::bilinear_tap(oy, h, oh), u = math::bilinear_tap(ox, w, ow);
    const T* r0 = x + (p * h + v.i0) * w;
    const T* r1 = x + (p * h + v.i1) * w;
    const float top = u.w0 * to_f32(r0[u.i0]) + u.w1 * to_f32(r0[u.i1]);
    const float bottom = u.w0 * to_f32(r1[u.i0]) + u.w1 * to_f32(r1[u.i1]);
    y[i] = from_f32<T>(v.w0 * top + v.w1 * bottom);
  }
}

}  // namespace

void CudaBackend::pool2d_fwd(const Tensor& x, const PoolGeometry& g, PoolKind kind, const Tensor& y) {
  const Pool2dShape s = pool2d_shape(x, g, y);
  cuda::check_on_device(x, "pool2d x");
  cuda::check_on_device(y, "pool2d y");
  cuda::same_dtype(x, y, "pool2d x and y");
  const i64 n = y.numel();
  if (n == 0) return;
  cuda::dispatch_float(x.dtype, "pool2d", [&](auto tag) {
    using T = decltype(tag);
    pool2d_kernel<T><<<cuda::grid_for(n), cuda::kThreads, 0, stream_>>>(x.as<T>(), y.as<T>(), s.h, s.w, s.oh,
                                                                        s.ow, g, kind, n);
    DIT_CUDA_LAUNCH_CHECK();
  });
}

void CudaBackend::resize_bilinear(const Tensor& x, const Tensor& y) {
  check_resize(x, y);
  cuda::check_on_device(x, "resize x");
  cuda::check_on_device(y, "resize y");
  cuda::same_dtype(x, y, "resize x and y");
  const i64 n = y.numel();
  if (n == 0) return;
  cuda::dispatch_float(x.dtype, "resize_bilinear", [&](auto tag) {
    using T = decltype(tag);
    resize_bilinear_kernel<T><<<cuda::grid_for(n), cuda::kThreads, 0, stream_>>>(
        x.as<T>(), y.as<T>(), static_cast<int>(x.dim(2)), static_cast<int>(x.dim(3)), static_cast<int>(y.dim(2)),
        static_cast<int>(y.dim(3)), n);
    DIT_CUDA_LAUNCH_CHECK();
  });
}

void CudaBackend::copy_channels(const Tensor& src, const Tensor& dst, std::int64_t channel_offset) {
  check_copy_channels(src, dst, channel_offset);
  cuda::check_on_device(src, "copy_channels src");
  cuda::check_on_device(dst, "copy_channels dst");
  cuda::same_dtype(src, dst, "copy_channels src and dst");
  if (src.numel() == 0) return;
  // One row per image: src's c planes, contiguous, into dst's rows of C planes at the offset.
  const std::size_t elem = dtype_size(src.dtype), plane = static_cast<std::size_t>(src.dim(2) * src.dim(3));
  const std::size_t row = static_cast<std::size_t>(src.dim(1)) * plane * elem;
  const std::size_t pitch = static_cast<std::size_t>(dst.dim(1)) * plane * elem;
  char* to = static_cast<char*>(dst.data) + static_cast<std::size_t>(channel_offset) * plane * elem;
  DIT_CUDA_CHECK(cudaMemcpy2DAsync(to, pitch, src.data, row, row, static_cast<std::size_t>(src.dim(0)),
                                   cudaMemcpyDeviceToDevice, stream_));
}

}  // namespace dit
