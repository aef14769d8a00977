// CUDA backend: the training step's own primitives (see backend.h): keyed noise, q_sample and the
// diffusion loss of a microbatch (math.h's per-element functor, one block per sample), the fused
// AdamW + EMA pass and the global norm's single reduction over the counted ranges of a shard.
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_backend.h"
#include "core/philox.h"

namespace dit {

using cuda::from_f32;
using cuda::i64;
using cuda::to_f32;

namespace {

constexpr int kFaultBadTimestep = 2;
constexpr double kLn2 = 0.6931471805599453;

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

// One block per sample: every element's terms and gradient, then the sample's sums.
template <typename T>
__global__ void diffusion_loss_kernel(const T* out, const float* x0, const float* noise,
                                      const std::int32_t* t, const float* coefs, i64 steps, i64 p,
                                      math::LossKind kind, double grad_inv, T* dout, float* terms,
                                      int* fault) {
  const bool learn_sigma = kind.learn_sigma();
  const i64 i = blockIdx.x, per_out = kind.out_factor() * p;
  const float* c = loss_row(coefs, t, i, steps, fault);
  if (!c) return;
  const double w = kind.weighting == math::LossWeighting::Table ? c[math::kLossWeight] : 1.0;
  double mse = 0, vb = 0;
  for (i64 j = threadIdx.x; j < p; j += blockDim.x) {
    const T* o = out + i * per_out;
    const math::LossElement e =
        math::loss_element(to_f32(o[j]), learn_sigma ? to_f32(o[p + j]) : 0.f, x0[i * p + j],
                           noise[i * p + j], c, learn_sigma);
    mse += e.mse;
    vb += e.vb;
    dout[i * per_out + j] = from_f32<T>(static_cast<float>(w * e.d_eps * grad_inv));
    if (learn_sigma) dout[i * per_out + p + j] = from_f32<T>(static_cast<float>(e.d_v * grad_inv / kLn2));
  }
  double m = cuda::block_sum(mse), v = cuda::block_sum(vb);
  if (threadIdx.x != 0) return;
  m /= static_cast<double>(p);
  v = learn_sigma ? v / static_cast<double>(p) / kLn2 : 0.0;
  terms[3 * i] = static_cast<float>(w * m + v);
  terms[3 * i + 1] = static_cast<float>(m);
  terms[3 * i + 2] = static_cast<float>(v);
}

// The flow loss: one block per sample, one thread per pixel (math::flow_pixel over its channels).
template <typename T>
__global__ void velocity_loss_kernel(const T* out, const float* x0, const float* noise, i64 channels, i64 hw,
                                     math::LossCosine cosine, double mse_scale, double cos_scale, T* dout,
                                     float* terms) {
  const i64 i = blockIdx.x, p = channels * hw;
  const T* v = out + i * p;
  T* g = dout + i * p;
  double sq = 0, cos = 0;
  for (i64 q = threadIdx.x; q < hw; q += blockDim.x) {
    const math::FlowPixel px = math::flow_pixel([v](i64 j) { return static_cast<double>(to_f32(v[j])); },
                                                x0 + i * p, noise + i * p, q, channels, hw, cosine, mse_scale,
                                                cos_scale, [g](i64 j, double d) { g[j] = from_f32<T>(static_cast<float>(d)); });
    sq += px.sq;
    cos += px.one_minus_cos;
  }
  double m = cuda::block_sum(sq), c = cuda::block_sum(cos);
  if (threadIdx.x != 0) return;
  m /= static_cast<double>(p);
  c = cosine == math::LossCosine::Yes ? c / static_cast<double>(hw) : 0.0;
  terms[3 * i] = static_cast<float>(m + c);
  terms[3 * i + 1] = static_cast<float>(m);
  terms[3 * i + 2] = static_cast<float>(c);
}

// Output distillation: one block per sample (math::kd_element per element, then the sums).
template <typename T>
__global__ void distill_output_kernel(const T* out, const T* tout, const float* x0, const float* noise,
                                      const std::int32_t* t, const float* coefs, i64 steps, i64 p, i64 per_t,
                                      bool learn_sigma, double grad_inv, T* dout, float* terms, int* fault) {
  const i64 i = blockIdx.x, per_out = (learn_sigma ? 2 : 1) * p;
  const float* c = learn_sigma ? loss_row(coefs, t, i, steps, fault) : nullptr;
  if (learn_sigma && !c) return;
  const T *s = out + i * per_out, *te = tout + i * per_t;
  T* g = dout + i * per_out;
  double sq = 0, vb = 0;
  for (i64 j = threadIdx.x; j < p; j += blockDim.x) {
    const math::KdElement k = math::kd_element(to_f32(s[j]), learn_sigma ? to_f32(s[p + j]) : 0.f, to_f32(te[j]),
                                               learn_sigma ? to_f32(te[p + j]) : 0.f, x0[i * p + j],
                                               noise[i * p + j], c, learn_sigma);
    sq += k.sq;
    vb += k.vb;
    g[j] = from_f32<T>(static_cast<float>(to_f32(g[j]) + grad_inv * k.d_s));
    if (learn_sigma) g[p + j] = from_f32<T>(static_cast<float>(to_f32(g[p + j]) + grad_inv * k.d_sv / kLn2));
  }
  const double total_sq = cuda::block_sum(sq), total_vb = cuda::block_sum(vb);
  if (threadIdx.x != 0) return;
  terms[2 * i] = static_cast<float>(total_sq / static_cast<double>(p));
  terms[2 * i + 1] = static_cast<float>(learn_sigma ? total_vb / static_cast<double>(p) / kLn2 : 0.0);
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

// Masked feature distillation: one block per sample; the two samples' means and unbiased
// deviations in two passes, then the loss and the gradient.
template <typename T>
__global__ void feature_distill_kernel(const T* fs, const T* ft, i64 m, double sigma, double grad_inv, T* dfs,
                                       float* terms) {
  const i64 i = blockIdx.x;
  const T *s = fs + i * m, *te = ft + i * m;
  double ss = 0, st = 0;
  for (i64 j = threadIdx.x; j < m; j += blockDim.x) ss += to_f32(s[j]), st += to_f32(te[j]);
  const double mean_s = block_sum_all(ss) / static_cast<double>(m), mean_t = block_sum_all(st) / static_cast<double>(m);
  double vs = 0, vt = 0;
  for (i64 j = threadIdx.x; j < m; j += blockDim.x) {
    const double a = to_f32(s[j]) - mean_s, b = to_f32(te[j]) - mean_t;
    vs += a * a, vt += b * b;
  }
  const double bound_s = sigma * sqrt(block_sum_all(vs) / static_cast<double>(m - 1));
  const double bound_t = sigma * sqrt(block_sum_all(vt) / static_cast<double>(m - 1));
  double loss = 0;
  for (i64 j = threadIdx.x; j < m; j += blockDim.x) {
    const double a = to_f32(s[j]), b = to_f32(te[j]);
    const double ks = sigma <= 0 || fabs(a - mean_s) < bound_s ? 1.0 : 0.0;
    const double kt = sigma <= 0 || fabs(b - mean_t) < bound_t ? 1.0 : 0.0;
    const double d = ks * a - kt * b;
    loss += d * d;
    dfs[i * m + j] = from_f32<T>(static_cast<float>(grad_inv * 2.0 * ks * d));
  }
  const double total = cuda::block_sum(loss);
  if (threadIdx.x == 0) terms[i] += static_cast<float>(total / static_cast<double>(m));
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
    math::adamw_update(p, to_f32(grad[i]), mi, vi, h);
    master[i] = p, m[i] = mi, v[i] = vi;
    ema[i] = math::ema_update(ema[i], p, decay);
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

void CudaBackend::diffusion_loss(const Tensor& out, const Tensor& x0, const Tensor& noise,
                                 const Tensor& t, const Tensor& coefs, const math::LossKind& kind,
                                 float grad_scale, const Tensor& dout, const Tensor& terms) {
  const i64 n = x0.dim(0), p = x0.numel() / std::max<i64>(n, 1);
  const bool velocity = kind.target == math::LossTarget::Velocity;
  DIT_CHECK(out.numel() == n * kind.out_factor() * p && dout.numel() == out.numel() &&
                noise.numel() == x0.numel() && terms.numel() == 3 * n &&
                (!velocity || (!kind.learn_sigma() && x0.shape.rank == 4)),
            "diffusion_loss: out ", out.shape.str(), ", x0 ", x0.shape.str(), ", dout ",
            dout.shape.str(), ", terms ", terms.shape.str(), " do not fit");
  cuda::same_dtype(out, dout, "diffusion_loss out and dout");
  cuda::check_f32(x0, "loss x0");
  cuda::check_f32(noise, "loss noise");
  cuda::check_f32(terms, "loss terms");
  for (const Tensor* x : {&out, &dout}) cuda::check_on_device(*x, "diffusion_loss");
  check_table(t, coefs, n);
  if (n == 0) return;
  const double grad_inv = static_cast<double>(grad_scale) / (static_cast<double>(p) * static_cast<double>(n));
  cuda::dispatch_float(out.dtype, "diffusion_loss out", [&](auto tag) {
    using T = decltype(tag);
    if (velocity) {
      const i64 hw = x0.dim(2) * x0.dim(3);
      const double cos_scale = static_cast<double>(grad_scale) / (static_cast<double>(hw) * static_cast<double>(n));
      velocity_loss_kernel<T><<<static_cast<unsigned>(n), cuda::kThreads, 0, stream_>>>(
          out.as<T>(), x0.as<float>(), noise.as<float>(), x0.dim(1), hw, kind.cosine, grad_inv, cos_scale,
          dout.as<T>(), terms.as<float>());
    } else {
      diffusion_loss_kernel<T><<<static_cast<unsigned>(n), cuda::kThreads, 0, stream_>>>(
          out.as<T>(), x0.as<float>(), noise.as<float>(), t.as<std::int32_t>(), coefs.as<float>(),
          coefs.dim(0), p, kind, grad_inv, dout.as<T>(), terms.as<float>(), fault_dev_);
    }
    DIT_CUDA_LAUNCH_CHECK();
  });
}

void CudaBackend::distill_output_loss(const Tensor& out, const Tensor& tout, const Tensor& x0, const Tensor& noise,
                                      const Tensor& t, const Tensor& coefs, const math::LossKind& kind,
                                      float grad_scale, const Tensor& dout, const Tensor& terms) {
  const i64 n = x0.dim(0), p = x0.numel() / std::max<i64>(n, 1), per_t = n > 0 ? tout.numel() / n : 0;
  const bool learn_sigma = kind.learn_sigma();
  DIT_CHECK(out.numel() == n * kind.out_factor() * p && dout.numel() == out.numel() && noise.numel() == x0.numel() &&
                (per_t == p || per_t == 2 * p) && tout.numel() == n * per_t && (!learn_sigma || per_t == 2 * p) &&
                terms.numel() == 2 * n,
            "distill_output_loss: out ", out.shape.str(), ", teacher out ", tout.shape.str(), ", x0 ",
            x0.shape.str(), ", dout ", dout.shape.str(), ", terms ", terms.shape.str(), " do not fit");
  cuda::same_dtype(out, dout, "distill_output_loss out and dout");
  cuda::same_dtype(out, tout, "distill_output_loss out and teacher out");
  cuda::check_f32(x0, "kd x0");
  cuda::check_f32(noise, "kd noise");
  cuda::check_f32(terms, "kd terms");
  for (const Tensor* x : {&out, &tout, &dout}) cuda::check_on_device(*x, "distill_output_loss");
  if (learn_sigma) check_table(t, coefs, n);
  if (n == 0) return;
  const double grad_inv = static_cast<double>(grad_scale) / (static_cast<double>(p) * static_cast<double>(n));
  cuda::dispatch_float(out.dtype, "distill_output_loss out", [&](auto tag) {
    using T = decltype(tag);
    distill_output_kernel<T><<<static_cast<unsigned>(n), cuda::kThreads, 0, stream_>>>(
        out.as<T>(), tout.as<T>(), x0.as<float>(), noise.as<float>(),
        learn_sigma ? t.as<std::int32_t>() : nullptr, learn_sigma ? coefs.as<float>() : nullptr,
        learn_sigma ? coefs.dim(0) : 0, p, per_t, learn_sigma, grad_inv, dout.as<T>(), terms.as<float>(),
        fault_dev_);
    DIT_CUDA_LAUNCH_CHECK();
  });
}

void CudaBackend::feature_distill(const Tensor& fs, const Tensor& ft, double sigma, float grad_scale,
                                  const Tensor& dfs, const Tensor& terms) {
  const i64 n = fs.shape.rank > 0 ? fs.dim(0) : 0, m = n > 0 ? fs.numel() / n : 0;
  DIT_CHECK(ft.shape == fs.shape && dfs.numel() == fs.numel() && terms.numel() == n && m > 1,
            "feature_distill: student ", fs.shape.str(), ", teacher ", ft.shape.str(), ", dfs ", dfs.shape.str(),
            ", terms ", terms.shape.str(), " do not fit");
  cuda::same_dtype(fs, ft, "feature_distill student and teacher");
  cuda::same_dtype(fs, dfs, "feature_distill student and dfs");
  cuda::check_f32(terms, "feature kd terms");
  for (const Tensor* x : {&fs, &ft, &dfs}) cuda::check_on_device(*x, "feature_distill");
  const double grad_inv = static_cast<double>(grad_scale) / (static_cast<double>(m) * static_cast<double>(n));
  cuda::dispatch_float(fs.dtype, "feature_distill", [&](auto tag) {
    using T = decltype(tag);
    feature_distill_kernel<T><<<static_cast<unsigned>(n), cuda::kThreads, 0, stream_>>>(
        fs.as<T>(), ft.as<T>(), m, sigma, grad_inv, dfs.as<T>(), terms.as<float>());
    DIT_CUDA_LAUNCH_CHECK();
  });
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
