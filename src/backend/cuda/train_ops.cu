// CUDA backend: the training step's own primitives (see backend.h): keyed noise, q_sample, the
// per-sample losses of a microbatch (math.h's SampleLoss functors through one kernel, a block per
// sample), the fused AdamW + EMA pass and the global norm's single reduction over the counted
// ranges of a shard.
#include <type_traits>
#include <variant>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/optim_math.cuh"
#include "core/philox.h"

namespace dit {

using cuda::from_f32;
using cuda::i64;
using cuda::to_f32;

namespace {

constexpr int kFaultBadTimestep = 2;

__global__ void philox_normal_kernel(std::uint64_t seed, std::uint32_t purpose, std::uint64_t step,
                                     std::uint64_t first, i64 p, i64 n, float* out) {
  for (i64 k = cuda::global_thread(); k < n; k += cuda::grid_stride())
    out[k] = philox_normal_at(seed, purpose, step, first + static_cast<std::uint64_t>(k / p),
                              static_cast<std::uint64_t>(k % p));
}

// The schedule row of sample i, or null (and a fault) for an index outside the table.
__device__ const float* loss_row(const float* coefs, const std::int32_t* t, i64 i, i64 steps,
                                 int* fault) {
  const std::int32_t s = t[i];
  if (s < 0 || s >= steps) {
    *fault = kFaultBadTimestep;
    return nullptr;
  }
  return coefs + static_cast<i64>(s) * math::kNumLossCoefs;
}

template <typename T>
__global__ void q_sample_kernel(const float* x0, const float* noise, const std::int32_t* t,
                                const float* coefs, i64 steps, i64 p, i64 n, T* x_t, int* fault) {
  for (i64 k = cuda::global_thread(); k < n; k += cuda::grid_stride()) {
    const float* c = loss_row(coefs, t, k / p, steps, fault);
    if (!c) return;
    x_t[k] = from_f32<T>(static_cast<float>(static_cast<double>(c[math::kSqrtAlphasCumprod]) * x0[k] +
                                            static_cast<double>(c[math::kSqrtOneMinusAlphasCumprod]) * noise[k]));
  }
}

// The sum over the block, on every thread.
__device__ double block_sum_all(double v) {
  __shared__ double total;
  const double t = cuda::block_sum(v);
  if (threadIdx.x == 0) total = t;
  __syncthreads();
  const double out = total;
  __syncthreads();
  return out;
}

// One sample of a per-sample loss, as math.h's functors read it: the model's tensors in the
// storage type T, read and written as float.
template <typename T>
struct DeviceSample {
  const T *pa, *pb;
  T* pg;
  const float *x0, *noise;
  float* terms;
  __device__ float a(i64 k) const { return to_f32(pa[k]); }
  __device__ float b(i64 k) const { return to_f32(pb[k]); }
  __device__ float g(i64 k) const { return to_f32(pg[k]); }
  __device__ void set_g(i64 k, double v) const { pg[k] = from_f32<T>(static_cast<float>(v)); }
};

template <typename T>
struct DeviceLossIo {
  const T *a, *b;
  T* g;
  const float *x0, *noise;
  float* terms;
  const std::int32_t* t;
  const float* coefs;
  i64 steps;
};

// Any per-sample loss F (math.h SampleLoss): one block per sample; each pass's items strided
// over the block's threads and summed over the block; thread 0 writes the sample's terms.
template <typename F, typename T>
__global__ void sample_loss_kernel(F f, math::LossShape sh, DeviceLossIo<T> io, int* fault) {
  const i64 i = blockIdx.x;
  const float* c = nullptr;
  if (sh.uses_row) {
    c = loss_row(io.coefs, io.t, i, io.steps, fault);
    if (!c) return;  // the whole block: one sample
  }
  const DeviceSample<T> s{io.a + i * sh.a,  io.b ? io.b + i * sh.b : nullptr, io.g + i * sh.a,
                          io.x0 ? io.x0 + i * sh.x : nullptr, io.noise ? io.noise + i * sh.x : nullptr,
                          io.terms + i * sh.terms};
  math::LossSums done[F::kPasses];
  for (int pass = 0; pass < F::kPasses; ++pass) {
    math::LossSums acc;
    for (i64 j = threadIdx.x; j < f.items(); j += blockDim.x) f.item(pass, s, j, c, done, acc);
    done[pass].a = block_sum_all(acc.a);
    done[pass].b = block_sum_all(acc.b);
  }
  if (threadIdx.x == 0) f.finish(s, c, done);
}

template <typename G, typename P>
struct AdamWEma {
  float* master;
  const G* grad;
  float* m;
  float* v;
  float* ema;
  P* param;  // null: no storage copy (fp32 runs, where the master is the parameter)
  math::AdamWParams h;
  float decay;
  __device__ void operator()(i64 i) const {
    float p = master[i], mi = m[i], vi = v[i];
    cuda::adamw_update_rn(p, to_f32(grad[i]), mi, vi, h);
    master[i] = p, m[i] = mi, v[i] = vi;
    ema[i] = cuda::ema_update_rn(ema[i], p, decay);
    if (param) param[i] = from_f32<P>(p);
  }
};

template <typename Op>
__global__ void for_each_kernel(i64 n, Op op) {
  for (i64 i = cuda::global_thread(); i < n; i += cuda::grid_stride()) op(i);
}

// Partial sums of x^2 over the elements inside the sorted ranges (binary search per element).
__global__ void ranged_squares_partial(const float* x, i64 n, const std::int32_t* ranges, int r,
                                       double* partial) {
  double s = 0;
  for (i64 i = cuda::global_thread(); i < n; i += cuda::grid_stride()) {
    int lo = 0, hi = r;  // the last range starting at or before i
    while (hi - lo > 1) {
      const int mid = (lo + hi) / 2;
      (ranges[2 * mid] <= i ? lo : hi) = mid;
    }
    if (r > 0 && ranges[2 * lo] <= i && i < ranges[2 * lo + 1]) s += static_cast<double>(x[i]) * x[i];
  }
  s = cuda::block_sum(s);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

void check_table(const Tensor& t, const Tensor& coefs, i64 n) {
  DIT_CHECK(t.dtype == DType::I32 && t.numel() == n, "diffusion: t must be (", n,
            ") int32 schedule indices, got ", t.shape.str());
  DIT_CHECK(coefs.shape.rank == 2 && coefs.dim(1) == math::kNumLossCoefs, "diffusion: coefs ",
            coefs.shape.str(), " is not a schedule table");
  cuda::check_f32(coefs, "diffusion coefs");
  cuda::check_on_device(t, "diffusion t");
  cuda::check_on_device(coefs, "diffusion coefs");
}

}  // namespace

void CudaBackend::philox_normal(std::uint64_t seed, std::uint32_t purpose, std::uint64_t step,
                                std::uint64_t first, const Tensor& noise) {
  cuda::check_f32(noise, "philox_normal");
  cuda::check_on_device(noise, "philox_normal");
  const i64 n = noise.numel(), rows = noise.dim(0);
  if (n == 0) return;
  philox_normal_kernel<<<cuda::grid_for(n), cuda::kThreads, 0, stream_>>>(seed, purpose, step, first,
                                                                           n / rows, n, noise.as<float>());
  DIT_CUDA_LAUNCH_CHECK();
}

void CudaBackend::q_sample(const Tensor& x0, const Tensor& noise, const Tensor& t,
                           const Tensor& coefs, const Tensor& x_t) {
  const i64 n = x0.numel(), rows = x0.dim(0);
  cuda::same_numel(x0, noise, "q_sample noise");
  cuda::same_numel(x0, x_t, "q_sample x_t");
  cuda::check_f32(x0, "q_sample x0");
  cuda::check_f32(noise, "q_sample noise");
  cuda::check_on_device(x_t, "q_sample x_t");
  check_table(t, coefs, rows);
  if (n == 0) return;
  cuda::dispatch_float(x_t.dtype, "q_sample x_t", [&](auto tag) {
    using T = decltype(tag);
    q_sample_kernel<T><<<cuda::grid_for(n), cuda::kThreads, 0, stream_>>>(
        x0.as<float>(), noise.as<float>(), t.as<std::int32_t>(), coefs.as<float>(), coefs.dim(0),
        n / rows, n, x_t.as<T>(), fault_dev_);
    DIT_CUDA_LAUNCH_CHECK();
  });
}

void CudaBackend::sample_loss(const math::SampleLoss& loss, const LossTensors& io) {
  const i64 n = check_sample_loss(loss, io);
  const math::LossShape sh = std::visit([](const auto& f) { return f.shape(); }, loss);
  for (const Tensor* x : {&io.a, &io.b, &io.grad, &io.x0, &io.noise, &io.terms})
    if (x->data) cuda::check_on_device(*x, "sample_loss");
  if (sh.x > 0) {
    cuda::check_f32(io.x0, "loss x0");
    cuda::check_f32(io.noise, "loss noise");
  }
  cuda::check_f32(io.terms, "loss terms");
  if (sh.uses_row) check_table(io.t, io.coefs, n);
  if (n == 0) return;
  std::visit(
      [&](const auto& f) {
        using F = std::decay_t<decltype(f)>;
        cuda::dispatch_float(io.a.dtype, "sample_loss", [&](auto tag) {
          using T = decltype(tag);
          const DeviceLossIo<T> dio{io.a.as<T>(),
                                    sh.b > 0 ? io.b.as<T>() : nullptr,
                                    io.grad.as<T>(),
                                    sh.x > 0 ? io.x0.as<float>() : nullptr,
                                    sh.x > 0 ? io.noise.as<float>() : nullptr,
                                    io.terms.as<float>(),
                                    sh.uses_row ? io.t.as<std::int32_t>() : nullptr,
                                    sh.uses_row ? io.coefs.as<float>() : nullptr,
                                    sh.uses_row ? io.coefs.dim(0) : 0};
          sample_loss_kernel<F, T><<<static_cast<unsigned>(n), cuda::kThreads, 0, stream_>>>(f, sh, dio, fault_dev_);
          DIT_CUDA_LAUNCH_CHECK();
        });
      },
      loss);
}

void CudaBackend::adamw_ema_step(const Tensor& master, const Tensor& grad, const Tensor& exp_avg,
                                 const Tensor& exp_avg_sq, const Tensor& ema, const Tensor& param,
                                 const math::AdamWParams& h, float decay) {
  for (const Tensor* x : {&grad, &exp_avg, &exp_avg_sq, &ema}) cuda::same_numel(master, *x, "adamw_ema_step");
  for (const Tensor* x : {&master, &exp_avg, &exp_avg_sq, &ema}) cuda::check_f32(*x, "adamw_ema_step state");
  cuda::check_on_device(grad, "adamw_ema_step grad");
  const bool copy = param.data && param.data != master.data;
  if (copy) cuda::same_numel(master, param, "adamw_ema_step param");
  const i64 n = master.numel();
  if (n == 0) return;
  cuda::dispatch_float(grad.dtype, "adamw grad", [&](auto gtag) {
    using G = decltype(gtag);
    cuda::dispatch_float(copy ? param.dtype : DType::F32, "adamw param", [&](auto ptag) {
      using P = decltype(ptag);
      const AdamWEma<G, P> op{master.as<float>(), grad.as<G>(), exp_avg.as<float>(), exp_avg_sq.as<float>(),
                              ema.as<float>(), copy ? param.as<P>() : nullptr, h, decay};
      for_each_kernel<<<cuda::grid_for(n), cuda::kThreads, 0, stream_>>>(n, op);
      DIT_CUDA_LAUNCH_CHECK();
    });
  });
}

double CudaBackend::sum_squares_ranges(const Tensor& x, const Tensor& ranges) {
  cuda::check_f32(x, "sum_squares_ranges");
  cuda::check_on_device(x, "sum_squares_ranges");
  cuda::check_on_device(ranges, "sum_squares_ranges ranges");
  DIT_CHECK(ranges.dtype == DType::I32 && ranges.shape.rank == 2 && ranges.dim(1) == 2,
            "sum_squares_ranges: ranges must be (R, 2) int32, got ", ranges.shape.str());
  const i64 n = x.numel();
  if (n == 0) return 0.0;
  const int blocks = std::min(1024, cuda::grid_for(n));
  auto* partial = static_cast<double*>(scratch(blocks * sizeof(double)));
  ranged_squares_partial<<<blocks, cuda::kThreads, 0, stream_>>>(
      x.as<float>(), n, ranges.as<std::int32_t>(), static_cast<int>(ranges.dim(0)), partial);
  DIT_CUDA_LAUNCH_CHECK();
  return sum_on_host(partial, blocks);
}

}  // namespace dit
