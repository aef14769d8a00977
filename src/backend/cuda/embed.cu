// CUDA backend: embeddings (label gather and its gradient), sinusoidal timestep features, and
// patchify/unpatchify. Ids live on the device, so a bad id cannot throw where it is read: the
// kernel writes NaN, raises the backend's fault word, and the next synchronize() throws.
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_backend.h"

namespace dit {

using cuda::from_f32;
using cuda::i64;
using cuda::to_f32;

namespace {

constexpr int kFaultBadId = 1;

template <typename T>
__global__ void embedding_fwd_kernel(const T* table, const std::int32_t* ids, T* out, i64 n,
                                     i64 vocab, i64 d, int* fault) {
  for (i64 o = cuda::global_thread(); o < n * d; o += cuda::grid_stride()) {
    const i64 r = o / d, i = o % d;
    const std::int32_t id = ids[r];
    if (id < 0 || id >= vocab) {
      out[o] = from_f32<T>(NAN);
      *fault = kFaultBadId;
    } else {
      out[o] = table[id * d + i];
    }
  }
}

// dtable[ids[n]] += dout[n], deterministically and without atomics: block n acts only if n is the
// first occurrence of its id, and then sums every row with that id in index order (in fp32) and
// adds the total once. G, the table's gradient dtype, is fp32 in training (ParamSet's main grads).
template <typename T, typename G>
__global__ void embedding_bwd_kernel(const T* dout, const std::int32_t* ids, G* dtable, i64 n,
                                     i64 vocab, i64 d, int* fault) {
  __shared__ int repeated;
  const i64 row = blockIdx.x;
  const std::int32_t id = ids[row];
  if (id < 0 || id >= vocab) {
    if (threadIdx.x == 0) *fault = kFaultBadId;
    return;
  }
  if (threadIdx.x == 0) repeated = 0;
  __syncthreads();
  for (i64 m = threadIdx.x; m < row; m += blockDim.x)
    if (ids[m] == id) repeated = 1;  // every writer stores the same value
  __syncthreads();
  if (repeated) return;
  for (i64 i = threadIdx.x; i < d; i += blockDim.x) {
    float s = 0.f;
    for (i64 m = row; m < n; ++m)
      if (ids[m] == id) s += to_f32(dout[m * d + i]);
    G* dst = dtable + id * d + i;
    *dst = from_f32<G>(to_f32(*dst) + s);
  }
}

// out[n] = [cos(t_n f_i), sin(t_n f_i)], f_i = P^(-i/half), in double as the CPU computes it.
template <typename T>
__global__ void timestep_kernel(const float* t, T* out, i64 n, i64 f, double log_period) {
  const i64 half = f / 2;
  for (i64 o = cuda::global_thread(); o < n * f; o += cuda::grid_stride()) {
    const i64 r = o / f, i = o % f;
    float v = 0.f;
    if (i < 2 * half) {
      const i64 j = i < half ? i : i - half;
      const double arg = static_cast<double>(t[r]) * exp(-log_period * j / half);
      v = static_cast<float>(i < half ? cos(arg) : sin(arg));
    }
    out[o] = from_f32<T>(v);
  }
}

// One thread per image element; kToPatches chooses the direction (unpatchify is the inverse).
template <typename U, bool kToPatches>
__global__ void patch_kernel(U* img, U* patches, i64 n, i64 c, i64 h, i64 w, i64 p,
                             bool channel_major) {
  const i64 gw = w / p, tokens = (h / p) * gw, feat = c * p * p;
  for (i64 o = cuda::global_thread(); o < n * c * h * w; o += cuda::grid_stride()) {
    const i64 x = o % w, y = (o / w) % h, ch = (o / (w * h)) % c, b = o / (w * h * c);
    const i64 tok = (y / p) * gw + x / p, i = y % p, j = x % p;
    const i64 f = channel_major ? (ch * p + i) * p + j : (i * p + j) * c + ch;
    const i64 q = (b * tokens + tok) * feat + f;
    if (kToPatches) patches[q] = img[o];
    else img[o] = patches[q];
  }
}

void check_patch_shapes(const Tensor& img, const Tensor& patches, int p) {
  DIT_CHECK(img.shape.rank == 4 && p > 0 && img.dim(2) % p == 0 && img.dim(3) % p == 0,
            "patchify: image ", img.shape.str(), " is not divisible into ", p, "x", p, " patches");
  const i64 n = img.dim(0), c = img.dim(1), h = img.dim(2), w = img.dim(3);
  DIT_CHECK(patches.shape.rank == 3 && patches.dim(0) == n && patches.dim(1) == (h / p) * (w / p) &&
                patches.dim(2) == c * p * p,
            "patchify: patches ", patches.shape.str(), " do not match image ", img.shape.str(),
            " with p = ", p);
  cuda::check_on_device(img, "patchify image");
  cuda::check_on_device(patches, "patchify patches");
  cuda::same_dtype(img, patches, "patchify");
}

template <bool kToPatches>
void launch_patch(const Tensor& img, const Tensor& patches, int p, PatchOrder order,
                  cudaStream_t s) {
  check_patch_shapes(img, patches, p);
  const i64 total = img.numel();
  if (total == 0) return;
  cuda::dispatch_width(img.dtype, [&](auto tag) {
    using U = decltype(tag);
    patch_kernel<U, kToPatches><<<cuda::grid_for(total), cuda::kThreads, 0, s>>>(
        img.as<U>(), patches.as<U>(), img.dim(0), img.dim(1), img.dim(2), img.dim(3), p,
        order == PatchOrder::ChannelMajor);
    DIT_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace

void CudaBackend::embedding_fwd(const Tensor& table, const Tensor& ids, const Tensor& out) {
  DIT_CHECK(ids.dtype == DType::I32 && table.shape.rank == 2 && out.shape.rank == 2 &&
                out.dim(0) == ids.numel() && out.dim(1) == table.dim(1),
            "embedding_fwd: table ", table.shape.str(), " ids ", ids.shape.str(), " out ",
            out.shape.str());
  for (const Tensor* t : {&table, &ids, &out}) cuda::check_on_device(*t, "embedding_fwd");
  cuda::same_dtype(table, out, "embedding_fwd");
  const i64 n = ids.numel(), d = table.dim(1);
  if (n * d == 0) return;
  cuda::dispatch_float(table.dtype, "embedding table", [&](auto tag) {
    using T = decltype(tag);
    embedding_fwd_kernel<T><<<cuda::grid_for(n * d), cuda::kThreads, 0, stream_>>>(
        table.as<T>(), ids.as<std::int32_t>(), out.as<T>(), n, table.dim(0), d, fault_dev_);
    DIT_CUDA_LAUNCH_CHECK();
  });
}

void CudaBackend::embedding_bwd(const Tensor& dout, const Tensor& ids, const Tensor& dtable) {
  DIT_CHECK(ids.dtype == DType::I32 && dtable.shape.rank == 2 && dout.shape.rank == 2 &&
                dout.dim(0) == ids.numel() && dout.dim(1) == dtable.dim(1),
            "embedding_bwd: dtable ", dtable.shape.str(), " ids ", ids.shape.str(), " dout ",
            dout.shape.str());
  for (const Tensor* t : {&dout, &ids, &dtable}) cuda::check_on_device(*t, "embedding_bwd");
  // dtable: dout's dtype, or fp32 (gradients accumulate in fp32 in 16-bit runs).
  const i64 n = ids.numel(), d = dtable.dim(1);
  if (n == 0 || d == 0) return;
  DIT_CHECK(n <= 0x7fffffff, "embedding_bwd: ", n, " ids exceed the grid");
  cuda::dispatch_float(dout.dtype, "embedding dout", [&](auto tag) {
    using T = decltype(tag);
    cuda::dispatch_float(dtable.dtype, "embedding dtable", [&](auto gtag) {
      using G = decltype(gtag);
      embedding_bwd_kernel<T, G><<<static_cast<unsigned>(n), cuda::kThreads, 0, stream_>>>(
          dout.as<T>(), ids.as<std::int32_t>(), dtable.as<G>(), n, dtable.dim(0), d, fault_dev_);
      DIT_CUDA_LAUNCH_CHECK();
    });
  });
}

void CudaBackend::timestep_embedding(const Tensor& t, float max_period, const Tensor& out) {
  DIT_CHECK(out.shape.rank == 2 && out.dim(0) == t.numel(), "timestep_embedding: t ",
            t.shape.str(), " out ", out.shape.str());
  cuda::check_f32(t, "timesteps");
  cuda::check_on_device(out, "timestep features");
  const i64 n = t.numel(), f = out.dim(1);
  if (n * f == 0) return;
  cuda::dispatch_float(out.dtype, "timestep features", [&](auto tag) {
    using T = decltype(tag);
    timestep_kernel<T><<<cuda::grid_for(n * f), cuda::kThreads, 0, stream_>>>(
        t.as<float>(), out.as<T>(), n, f, std::log(static_cast<double>(max_period)));
    DIT_CUDA_LAUNCH_CHECK();
  });
}

void CudaBackend::patchify(const Tensor& img, int p, PatchOrder order, const Tensor& patches) {
  launch_patch<true>(img, patches, p, order, stream_);
}

void CudaBackend::unpatchify(const Tensor& patches, int p, PatchOrder order, const Tensor& img) {
  launch_patch<false>(img, patches, p, order, stream_);
}

}  // namespace dit
