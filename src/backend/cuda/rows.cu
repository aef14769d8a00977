// CUDA backend: the row steps of the composed attention (backend/composed_attention.h) —
// softmax_rows (saving or reading the row logsumexp), softmax_rows_bwd (dS = P (dP - delta)) and
// row_dot. One warp per row, lanes striding over its columns, fp32 arithmetic; fixed reduction
// order, so results are the same run to run.
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_backend.h"

namespace dit {

using cuda::from_f32;
using cuda::i64;
using cuda::to_f32;

namespace {

constexpr int kRowWarps = 8;  // rows per block of 256 threads

__device__ __forceinline__ i64 warp_row() {
  return static_cast<i64>(blockIdx.x) * kRowWarps + threadIdx.x / 32;
}
__device__ __forceinline__ i64 warp_rows_stride() { return static_cast<i64>(gridDim.x) * kRowWarps; }

// p = exp(s - lse) per row; with `compute`, lse = log sum exp(s) first (max-shifted). p may be s
// (fp32): each element is read before the same thread writes it.
template <typename T>
__global__ void softmax_rows_kernel(const float* s, T* p, float* lse, i64 rows, i64 len, bool compute) {
  const int lane = threadIdx.x % 32;
  for (i64 r = warp_row(); r < rows; r += warp_rows_stride()) {
    const float* sr = s + r * len;
    float sub;
    if (compute) {
      float m = -INFINITY;
      for (i64 j = lane; j < len; j += 32) m = fmaxf(m, sr[j]);
      m = cuda::warp_max(m);
      float sum = 0.f;
      for (i64 j = lane; j < len; j += 32) sum += math::exp_f32(sr[j] - m);
      sum = cuda::warp_sum(sum);
      sub = m + logf(sum);
      if (lane == 0) lse[r] = sub;
    } else {
      sub = lse[r];
    }
    T* pr = p + r * len;
    for (i64 j = lane; j < len; j += 32) pr[j] = from_f32<T>(math::exp_f32(sr[j] - sub));
  }
}

// ds = p (dp - delta_row); ds may be p or dp (same element, same thread).
template <typename T>
__global__ void softmax_rows_bwd_kernel(const T* p, const float* dp, const float* delta, T* ds,
                                        i64 rows, i64 len) {
  const i64 n = rows * len;
  for (i64 i = cuda::global_thread(); i < n; i += cuda::grid_stride())
    ds[i] = from_f32<T>(math::softmax_grad(to_f32(p[i]), dp[i], delta[i / len]));
}

template <typename T>
__global__ void row_dot_kernel(const T* a, const T* b, float* out, i64 rows, i64 len) {
  const int lane = threadIdx.x % 32;
  for (i64 r = warp_row(); r < rows; r += warp_rows_stride()) {
    float d = 0.f;
    for (i64 j = lane; j < len; j += 32) d += to_f32(a[r * len + j]) * to_f32(b[r * len + j]);
    d = cuda::warp_sum(d);
    if (lane == 0) out[r] = d;
  }
}

int row_blocks(i64 rows) {
  const i64 b = (rows + kRowWarps - 1) / kRowWarps;
  return static_cast<int>(b < 1 ? 1 : (b > 65535LL * 8 ? 65535LL * 8 : b));
}

// (rows, len) of a 2-D device tensor.
void check_rows(const Tensor& t, const char* what) {
  DIT_CHECK(t.shape.rank == 2, what, ": expected 2-D (rows, length), got ", t.shape.str());
  cuda::check_on_device(t, what);
}

}  // namespace

void CudaBackend::softmax_rows(const Tensor& s, const Tensor& p, const Tensor& lse,
                               SoftmaxStats stats) {
  check_rows(s, "softmax_rows s");
  cuda::check_f32(s, "softmax_rows s");
  cuda::check_f32(lse, "softmax_rows lse");
  cuda::check_on_device(p, "softmax_rows p");
  DIT_CHECK(p.shape == s.shape && lse.numel() == s.dim(0), "softmax_rows: p ", p.shape.str(),
            " and lse ", lse.shape.str(), " for s ", s.shape.str());
  const i64 rows = s.dim(0), len = s.dim(1);
  if (rows == 0 || len == 0) return;
  cuda::dispatch_float(p.dtype, "softmax_rows p", [&](auto tag) {
    using T = decltype(tag);
    softmax_rows_kernel<T><<<row_blocks(rows), kRowWarps * 32, 0, stream_>>>(
        s.as<float>(), p.as<T>(), lse.as<float>(), rows, len, stats == SoftmaxStats::Compute);
    DIT_CUDA_LAUNCH_CHECK();
  });
}

void CudaBackend::softmax_rows_bwd(const Tensor& p, const Tensor& dp, const Tensor& delta,
                                   const Tensor& ds) {
  check_rows(p, "softmax_rows_bwd p");
  cuda::check_f32(dp, "softmax_rows_bwd dp");
  cuda::check_f32(delta, "softmax_rows_bwd delta");
  cuda::check_on_device(ds, "softmax_rows_bwd ds");
  cuda::same_dtype(p, ds, "softmax_rows_bwd p and ds");
  DIT_CHECK(dp.shape == p.shape && ds.shape == p.shape && delta.numel() == p.dim(0),
            "softmax_rows_bwd: dp ", dp.shape.str(), ", ds ", ds.shape.str(), " and delta ",
            delta.shape.str(), " for p ", p.shape.str());
  const i64 rows = p.dim(0), len = p.dim(1);
  if (rows == 0 || len == 0) return;
  cuda::dispatch_float(p.dtype, "softmax_rows_bwd", [&](auto tag) {
    using T = decltype(tag);
    softmax_rows_bwd_kernel<T><<<cuda::grid_for(rows * len), cuda::kThreads, 0, stream_>>>(
        p.as<T>(), dp.as<float>(), delta.as<float>(), ds.as<T>(), rows, len);
    DIT_CUDA_LAUNCH_CHECK();
  });
}

void CudaBackend::row_dot(const Tensor& a, const Tensor& b, const Tensor& out) {
  check_rows(a, "row_dot a");
  cuda::check_on_device(b, "row_dot b");
  cuda::check_f32(out, "row_dot out");
  cuda::same_dtype(a, b, "row_dot a and b");
  DIT_CHECK(b.shape == a.shape && out.numel() == a.dim(0), "row_dot: b ", b.shape.str(),
            " and out ", out.shape.str(), " for a ", a.shape.str());
  const i64 rows = a.dim(0), len = a.dim(1);
  if (rows == 0) return;
  cuda::dispatch_float(a.dtype, "row_dot", [&](auto tag) {
    using T = decltype(tag);
    row_dot_kernel<T><<<row_blocks(rows), kRowWarps * 32, 0, stream_>>>(
        a.as<T>(), b.as<T>(), out.as<float>(), rows, len);
    DIT_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace dit
