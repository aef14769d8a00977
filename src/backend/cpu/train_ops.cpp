// CPU backend: the training step's own primitives: keyed noise, q_sample, the per-sample losses
// of a microbatch (math.h's SampleLoss functors, one driver for all), and the optimizer's
// one-pass norm and fused AdamW + EMA over a flat shard.
#include <algorithm>
#include <cmath>
#include <variant>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/philox.h"

namespace dit {

namespace {

const float* f32(const Tensor& t, const char* what) {
  DIT_CHECK(t.device == Device::Host && t.dtype == DType::F32, what,
            ": the CPU backend needs an fp32 host tensor, got ", dtype_name(t.dtype));
  return static_cast<const float*>(t.data);
}
float* f32_out(const Tensor& t, const char* what) { return const_cast<float*>(f32(t, what)); }

// The sum of squares of x[0, n) in double: blocks of kSumBlock elements, each summed in 8 lanes
// (lane i % 8) and the lanes added in order, the blocks' sums added in order. The grouping depends
// only on n, not on the thread count; the blocks run in parallel when there are several.
constexpr std::int64_t kSumBlock = 1 << 15;
double sumsq_block(const float* __restrict x, std::int64_t n) {
  double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8)
#pragma omp simd
    for (int j = 0; j < 8; ++j) lane[j] += static_cast<double>(x[i + j]) * x[i + j];
  for (int j = 0; i < n; ++i, ++j) lane[j] += static_cast<double>(x[i]) * x[i];
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}
double sumsq_f64(const float* x, std::int64_t n) {
  const std::int64_t blocks = (n + kSumBlock - 1) / kSumBlock;
  if (blocks <= 1) return sumsq_block(x, n);
  std::vector<double> part(static_cast<std::size_t>(blocks));
#pragma omp parallel for schedule(static)
  for (std::int64_t b = 0; b < blocks; ++b)
    part[static_cast<std::size_t>(b)] = sumsq_block(x + b * kSumBlock, std::min(kSumBlock, n - b * kSumBlock));
  double s = 0;
  for (double v : part) s += v;
  return s;
}

// The schedule rows of a microbatch's samples, checked against the table.
struct LossRows {
  const float* table;
  const std::int32_t* t;
  std::int64_t steps;
  const float* row(std::int64_t i) const {
    DIT_CHECK(t[i] >= 0 && t[i] < steps, "diffusion: timestep ", t[i], " outside the schedule's ",
              steps, " steps");
    return table + static_cast<std::int64_t>(t[i]) * math::kNumLossCoefs;
  }
};

LossRows loss_rows(const Tensor& t, const Tensor& coefs, std::int64_t n) {
  DIT_CHECK(t.dtype == DType::I32 && t.numel() == n, "diffusion: t must be (", n,
            ") int32 schedule indices, got ", t.shape.str(), " ", dtype_name(t.dtype));
  DIT_CHECK(coefs.shape.rank == 2 && coefs.dim(1) == math::kNumLossCoefs, "diffusion: coefs ",
            coefs.shape.str(), " is not a (T, ", int(math::kNumLossCoefs), ") schedule table");
  return {f32(coefs, "diffusion coefs"), static_cast<const std::int32_t*>(t.data), coefs.dim(0)};
}

}  // namespace

void CpuBackend::philox_normal(std::uint64_t seed, std::uint32_t purpose, std::uint64_t step,
                               std::uint64_t first, const Tensor& noise) {
  float* out = f32_out(noise, "philox_normal");
  const std::int64_t n = noise.dim(0), p = noise.numel() / std::max<std::int64_t>(n, 1);
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i) {
    Philox rng(seed, static_cast<RngPurpose>(purpose), step, first + static_cast<std::uint64_t>(i));
    for (std::int64_t j = 0; j < p; ++j) out[i * p + j] = rng.normal();
  }
}

void CpuBackend::q_sample(const Tensor& x0, const Tensor& noise, const Tensor& t,
                          const Tensor& coefs, const Tensor& x_t) {
  const std::int64_t n = x0.dim(0), p = x0.numel() / std::max<std::int64_t>(n, 1);
  DIT_CHECK(noise.numel() == x0.numel() && x_t.numel() == x0.numel(), "q_sample: x0 ",
            x0.shape.str(), ", noise ", noise.shape.str(), " and x_t ", x_t.shape.str(), " differ");
  const LossRows rows = loss_rows(t, coefs, n);
  const float *a = f32(x0, "q_sample x0"), *e = f32(noise, "q_sample noise");
  float* out = f32_out(x_t, "q_sample x_t");
  for (std::int64_t i = 0; i < n; ++i) {
    const float* c = rows.row(i);
    for (std::int64_t j = i * p; j < (i + 1) * p; ++j)
      out[j] = static_cast<float>(static_cast<double>(c[math::kSqrtAlphasCumprod]) * a[j] +
                                  static_cast<double>(c[math::kSqrtOneMinusAlphasCumprod]) * e[j]);
  }
}

namespace {

// One sample of a per-sample loss, as math.h's functors read it: fp32 host pointers.
struct HostSample {
  const float *pa, *pb;
  float* pg;
  const float *x0, *noise;
  float* terms;
  float a(std::int64_t k) const { return pa[k]; }
  float b(std::int64_t k) const { return pb[k]; }
  float g(std::int64_t k) const { return pg[k]; }
  void set_g(std::int64_t k, double v) const { pg[k] = static_cast<float>(v); }
};

const float* f32_or_null(const Tensor& t, const char* what) { return t.data ? f32(t, what) : nullptr; }

// Every sample in its own thread; each pass over the sample's items in order.
template <class F>
void run_sample_loss(const F& f, const LossTensors& io, std::int64_t n) {
  const math::LossShape sh = f.shape();
  const LossRows rows = sh.uses_row ? loss_rows(io.t, io.coefs, n) : LossRows{};
  const float *a = f32(io.a, "loss out"), *b = f32_or_null(io.b, "loss teacher");
  const float *x0 = f32_or_null(io.x0, "loss x0"), *noise = f32_or_null(io.noise, "loss noise");
  float *g = f32_out(io.grad, "loss grad"), *terms = f32_out(io.terms, "loss terms");
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i) {
    const float* c = sh.uses_row ? rows.row(i) : nullptr;
    const HostSample s{a + i * sh.a,  b ? b + i * sh.b : nullptr, g + i * sh.a, x0 ? x0 + i * sh.x : nullptr,
                       noise ? noise + i * sh.x : nullptr, terms + i * sh.terms};
    math::LossSums done[F::kPasses];
    for (int pass = 0; pass < F::kPasses; ++pass)
      for (std::int64_t j = 0; j < f.items(); ++j) f.item(pass, s, j, c, done, done[pass]);
    f.finish(s, c, done);
  }
}

}  // namespace

void CpuBackend::sample_loss(const math::SampleLoss& loss, const LossTensors& io) {
  const std::int64_t n = check_sample_loss(loss, io);
  std::visit([&](const auto& f) { run_sample_loss(f, io, n); }, loss);
}

void CpuBackend::adamw_ema_step(const Tensor& master, const Tensor& grad, const Tensor& exp_avg,
                                const Tensor& exp_avg_sq, const Tensor& ema, const Tensor& param,
                                const math::AdamWParams& h, float decay) {
  const std::int64_t n = master.numel();
  DIT_CHECK(grad.numel() == n && exp_avg.numel() == n && exp_avg_sq.numel() == n && ema.numel() == n &&
                (!param.data || param.numel() == n),
            "adamw_ema_step: shard sizes differ");
  // Restricted pointers and the hyper-parameters in locals let the compiler vectorise the pass
  // (each element's arithmetic is the same as math::adamw_update's, so the bits are too).
  float* __restrict p = f32_out(master, "adamw master");
  const float* __restrict g = f32(grad, "adamw grad");
  float* __restrict m = f32_out(exp_avg, "adamw exp_avg");
  float* __restrict v = f32_out(exp_avg_sq, "adamw exp_avg_sq");
  float* __restrict e = f32_out(ema, "ema");
  float* __restrict out = param.data && param.data != master.data ? f32_out(param, "adamw param") : nullptr;
  const math::AdamWParams hp = h;
  if (out) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
    for (std::int64_t i = 0; i < n; ++i) {
      float pi = p[i], mi = m[i], vi = v[i];
      math::adamw_update(pi, g[i], mi, vi, hp);
      p[i] = pi, m[i] = mi, v[i] = vi, out[i] = pi;
      e[i] = math::ema_update(e[i], pi, decay);
    }
    return;
  }
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (std::int64_t i = 0; i < n; ++i) {
    float pi = p[i], mi = m[i], vi = v[i];
    math::adamw_update(pi, g[i], mi, vi, hp);
    p[i] = pi, m[i] = mi, v[i] = vi;
    e[i] = math::ema_update(e[i], pi, decay);
  }
}

double CpuBackend::sum_squares_ranges(const Tensor& x, const Tensor& ranges) {
  count_sync();  // a result on the host
  const float* p = f32(x, "sum_squares_ranges");
  DIT_CHECK(ranges.dtype == DType::I32 && ranges.shape.rank == 2 && ranges.dim(1) == 2,
            "sum_squares_ranges: ranges must be (R, 2) int32, got ", ranges.shape.str());
  const auto* r = static_cast<const std::int32_t*>(ranges.data);
  double s = 0;
  for (std::int64_t k = 0; k < ranges.dim(0); ++k) {
    DIT_CHECK(0 <= r[2 * k] && r[2 * k] <= r[2 * k + 1] && r[2 * k + 1] <= x.numel(),
              "sum_squares_ranges: range [", r[2 * k], ", ", r[2 * k + 1], ") outside ", x.numel());
    s += sumsq_f64(p + r[2 * k], r[2 * k + 1] - r[2 * k]);
  }
  return s;
}

}  // namespace dit
