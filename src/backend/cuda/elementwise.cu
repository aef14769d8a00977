// Elementwise kernels over flat ranges: each thread handles elements i, i + stride, ... so one
// launch of a bounded grid covers any size.
#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/elementwise.h"

namespace dit::cuda {

namespace {

constexpr int kThreads = 256;

int blocks_for(std::int64_t n) {
  const std::int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < 65535 * 8 ? (b > 0 ? b : 1) : 65535 * 8);
}

template <typename Fn>
__global__ void for_each_kernel(std::int64_t n, Fn fn) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    fn(i);
}

template <typename Fn>
void launch(std::int64_t n, cudaStream_t s, Fn fn) {
  if (n == 0) return;
  for_each_kernel<<<blocks_for(n), kThreads, 0, s>>>(n, fn);
  DIT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void gelu_tanh_fwd(const float* x, float* y, std::int64_t n, cudaStream_t s) {
  launch(n, s, [=] __device__(std::int64_t i) { y[i] = math::GeluTanh::forward(x[i]); });
}

void gelu_tanh_bwd(const float* x, const float* dy, float* dx, std::int64_t n, cudaStream_t s) {
  launch(n, s, [=] __device__(std::int64_t i) { dx[i] = dy[i] * math::GeluTanh::derivative(x[i]); });
}

void silu_fwd(const float* x, float* y, std::int64_t n, cudaStream_t s) {
  launch(n, s, [=] __device__(std::int64_t i) { y[i] = math::Silu::forward(x[i]); });
}

void silu_bwd(const float* x, const float* dy, float* dx, std::int64_t n, bool accumulate,
              cudaStream_t s) {
  launch(n, s, [=] __device__(std::int64_t i) {
    const float g = dy[i] * math::Silu::derivative(x[i]);
    dx[i] = accumulate ? dx[i] + g : g;
  });
}

void adamw_step(float* p, const float* g, float* m, float* v, std::int64_t n,
                const math::AdamWParams& h, cudaStream_t s) {
  const math::AdamWParams hp = h;
  launch(n, s, [=] __device__(std::int64_t i) { math::adamw_update(p[i], g[i], m[i], v[i], hp); });
}

void ema_step(float* ema, const float* p, float decay, std::int64_t n, cudaStream_t s) {
  launch(n, s, [=] __device__(std::int64_t i) { ema[i] = math::ema_update(ema[i], p[i], decay); });
}

}  // namespace dit::cuda
