// CUDA backend: the image-network primitives (backend.h "image networks"). Convolution is im2col
// of one image into the backend's scratch, then one GEMM (C = W col) through the backend's own
// gemm (cuBLASLt), then the bias per channel; GroupNorm is one block per (sample, group) with
// fp64 block sums (two passes: the mean, then the centred squares), math.h's group_norm_out for
// the output; nearest 2x upsampling is one thread per output value.
#include "backend/cuda/common.cuh"
#include "backend/conv_scratch.h"
#include "backend/cuda/cuda_backend.h"

namespace dit {

using cuda::from_f32;
using cuda::i64;
using cuda::to_f32;

namespace {

// col (C kh kw, Ho Wo) of one image x (C, H, W).
template <typename T>
__global__ void im2col_kernel(const T* x, T* col, i64 c, i64 h, i64 w, i64 kh, i64 kw, i64 oh, i64 ow,
                              int sh, int sw, int pt, int pl) {
  const i64 plane = oh * ow, n = c * kh * kw * plane;
  for (i64 i = cuda::global_thread(); i < n; i += cuda::grid_stride()) {
    const i64 ox = i % ow, oy = (i / ow) % oh, r = i / plane;
    const i64 b = r % kw, a = (r / kw) % kh, ci = r / (kw * kh);
    const i64 iy = oy * sh - pt + a, ix = ox * sw - pl + b;
    col[i] = (iy >= 0 && iy < h && ix >= 0 && ix < w) ? x[(ci * h + iy) * w + ix] : from_f32<T>(0.f);
  }
}

// y (K, P) of one image = y + product + bias[k], the fp32 product of the convolution's GEMM: a
// 16-bit y accumulating with a bias is rounded once.
template <typename T>
__global__ void add_product_bias_kernel(T* y, const float* product, const T* bias, i64 plane, i64 n) {
  for (i64 i = cuda::global_thread(); i < n; i += cuda::grid_stride())
    y[i] = from_f32<T>(to_f32(y[i]) + (product[i] + to_f32(bias[i / plane])));
}

// y (N, K, P) += bias[k].
template <typename T>
__global__ void channel_bias_kernel(T* y, const T* bias, i64 k, i64 plane, i64 n) {
  for (i64 i = cuda::global_thread(); i < n; i += cuda::grid_stride())
    y[i] = from_f32<T>(to_f32(y[i]) + to_f32(bias[(i / plane) % k]));
}

constexpr int kNormThreads = 256;

// One block per (sample, group): `count` contiguous values, channels c0.. of the sample.
template <typename T>
__global__ void group_norm_kernel(const T* x, const T* gamma, const T* beta, T* y, int groups,
                                  i64 per_group, i64 len, float eps, bool silu) {
  __shared__ float stats[2];
  const i64 u = blockIdx.x, count = per_group * len, c0 = (u % groups) * per_group;
  const T* xg = x + u * count;
  double s = 0.0;
  for (i64 i = threadIdx.x; i < count; i += blockDim.x) s += to_f32(xg[i]);
  s = cuda::block_sum(s);
  if (threadIdx.x == 0) stats[0] = static_cast<float>(s / static_cast<double>(count));
  __syncthreads();
  const float mean = stats[0];
  double q = 0.0;
  for (i64 i = threadIdx.x; i < count; i += blockDim.x) {
    const double d = static_cast<double>(to_f32(xg[i])) - mean;
    q += d * d;
  }
  q = cuda::block_sum(q);
  if (threadIdx.x == 0) stats[1] = math::norm_rstd(q / static_cast<double>(count), eps);
  __syncthreads();
  const float rstd = stats[1];
  T* yg = y + u * count;
  for (i64 i = threadIdx.x; i < count; i += blockDim.x) {
    const i64 ch = c0 + i / len;
    yg[i] = from_f32<T>(math::group_norm_out(to_f32(xg[i]), mean, rstd, to_f32(gamma[ch]), to_f32(beta[ch]), silu));
  }
}

template <typename T>
__global__ void upsample2x_kernel(const T* x, T* y, i64 h, i64 w, i64 n) {
  for (i64 i = cuda::global_thread(); i < n; i += cuda::grid_stride()) {
    const i64 j = i % (2 * w), r = (i / (2 * w)) % (2 * h), p = i / (4 * h * w);
    y[i] = x[(p * h + r / 2) * w + j / 2];
  }
}

}  // namespace

void CudaBackend::conv2d_fwd(const Tensor& x, const Tensor& w, const Tensor& bias,
                             const ConvGeometry& g, const Tensor& y, Accumulate acc) {
  const ConvShape s = conv_shape(x, w, g, y);
  cuda::check_on_device(x, "conv2d x");
  cuda::same_dtype(x, w, "conv2d x and w");
  cuda::same_dtype(x, y, "conv2d x and y");
  if (bias.data != nullptr) {
    DIT_CHECK(bias.numel() == s.k, "conv2d: a bias of ", bias.numel(), " values for ", s.k, " output channels");
    cuda::same_dtype(x, bias, "conv2d x and bias");
  }
  const i64 patch = s.c * s.kh * s.kw, plane = s.oh * s.ow;
  if (s.n == 0 || plane == 0) return;
  const Tensor wm = w.view(Shape{s.k, patch});
  const bool direct = s.kh == 1 && s.kw == 1 && g.stride_h == 1 && g.stride_w == 1 && g.pad_top == 0 &&
                      g.pad_bottom == 0 && g.pad_left == 0 && g.pad_right == 0;
  const std::size_t elem = dtype_size(x.dtype);
  const i64 total = s.n * s.k * plane;
  auto add_bias = [&] {
    cuda::dispatch_float(y.dtype, "conv2d bias", [&](auto tag) {
      using T = decltype(tag);
      channel_bias_kernel<T><<<cuda::grid_for(total), cuda::kThreads, 0, stream_>>>(y.as<T>(), bias.as<T>(), s.k,
                                                                                    plane, total);
      DIT_CUDA_LAUNCH_CHECK();
    });
  };
  // Each output is rounded to its storage type once, as the CPU backend rounds it. Overwriting with
  // a bias, y starts as the bias and the GEMMs add to it in fp32. A 16-bit y accumulating with a
  // bias (a ResNet's second convolution onto its shortcut) takes each image's product in fp32
  // scratch (conv_scratch.h), then y + product + bias. Adding the bias after the GEMMs rounded a
  // 16-bit output twice: on an H200 the tiny VAE's bf16 error against diffusers grew by a third
  // (decoder output 2.32e-2 against the CPU's 1.74e-2; single convolutions now match the CPU's).
  const ConvScratch need = conv_scratch(s, x.dtype, bias.data != nullptr, acc);  // as the caller asked
  const bool bias_first = bias.data != nullptr && acc == Accumulate::Overwrite;
  if (bias_first) {
    DIT_CUDA_CHECK(cudaMemsetAsync(y.data, 0, static_cast<std::size_t>(total) * elem, stream_));  // 0.0 in every type
    add_bias();
    acc = Accumulate::Add;
  }
  char* const work = !direct || need.product > 0 ? static_cast<char*>(scratch(need.total())) : nullptr;
  for (i64 n = 0; n < s.n; ++n) {
    const Tensor xn{static_cast<char*>(x.data) + static_cast<std::size_t>(n * s.c * s.h * s.w) * elem, x.dtype,
                    Shape{s.c, s.h * s.w}, Device::Cuda};
    const Tensor yn{static_cast<char*>(y.data) + static_cast<std::size_t>(n * s.k * plane) * elem, y.dtype,
                    Shape{s.k, plane}, Device::Cuda};
    // The GEMM's output: y itself, or the image's fp32 product (written, then added below).
    const bool to_product = need.product > 0;
    const Tensor out = to_product ? Tensor{work + need.product_at, DType::F32, Shape{s.k, plane}, Device::Cuda} : yn;
    const Accumulate out_acc = to_product ? Accumulate::Overwrite : acc;
    if (direct) {
      gemm(wm, Transpose::No, xn, Transpose::No, out, out_acc, 1.f);
    } else {
      // The GEMM reads the scratch before the next image's im2col overwrites it (one stream).
      const Tensor col{work, x.dtype, Shape{patch, plane}, Device::Cuda};
      cuda::dispatch_float(x.dtype, "conv2d", [&](auto tag) {
        using T = decltype(tag);
        im2col_kernel<T><<<cuda::grid_for(patch * plane), cuda::kThreads, 0, stream_>>>(
            xn.as<T>(), col.as<T>(), s.c, s.h, s.w, s.kh, s.kw, s.oh, s.ow, g.stride_h, g.stride_w, g.pad_top,
            g.pad_left);
        DIT_CUDA_LAUNCH_CHECK();
      });
      gemm(wm, Transpose::No, col, Transpose::No, out, out_acc, 1.f);
    }
    if (to_product)
      cuda::dispatch_float(y.dtype, "conv2d product", [&](auto tag) {
        using T = decltype(tag);
        add_product_bias_kernel<T><<<cuda::grid_for(s.k * plane), cuda::kThreads, 0, stream_>>>(
            yn.as<T>(), out.as<float>(), bias.as<T>(), plane, s.k * plane);
        DIT_CUDA_LAUNCH_CHECK();
      });
  }
  if (bias.data != nullptr && !bias_first && need.product == 0) add_bias();  // fp32 y accumulating: the bias after
}

void CudaBackend::group_norm_fwd(const Tensor& x, int groups, const Tensor& gamma, const Tensor& beta,
                                 float eps, bool silu, const Tensor& y) {
  const GroupNormShape s = group_norm_shape(x, groups, gamma, beta, y);
  cuda::check_on_device(x, "group_norm x");
  cuda::same_dtype(x, y, "group_norm x and y");
  cuda::same_dtype(x, gamma, "group_norm x and gamma");
  cuda::same_dtype(x, beta, "group_norm x and beta");
  const i64 units = s.n * groups;
  if (units == 0 || s.len == 0) return;
  DIT_CHECK(units <= 0x7fffffffLL, "group_norm: ", units, " (sample, group) pairs exceed one launch");
  cuda::dispatch_float(x.dtype, "group_norm", [&](auto tag) {
    using T = decltype(tag);
    group_norm_kernel<T><<<static_cast<unsigned>(units), kNormThreads, 0, stream_>>>(
        x.as<T>(), gamma.as<T>(), beta.as<T>(), y.as<T>(), groups, s.c / groups, s.len, eps, silu);
    DIT_CUDA_LAUNCH_CHECK();
  });
}

void CudaBackend::upsample_nearest2x(const Tensor& x, const Tensor& y) {
  check_upsample2x(x, y);
  cuda::check_on_device(x, "upsample x");
  cuda::same_dtype(x, y, "upsample x and y");
  const i64 n = y.numel();
  if (n == 0) return;
  cuda::dispatch_float(x.dtype, "upsample_nearest2x", [&](auto tag) {
    using T = decltype(tag);
    upsample2x_kernel<T><<<cuda::grid_for(n), cuda::kThreads, 0, stream_>>>(x.as<T>(), y.as<T>(), x.dim(2),
                                                                          x.dim(3), n);
    DIT_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace dit
