// Elementwise math shared by every backend: each function is compiled for the host (CPU backend,
// references) and for the device (CUDA kernels), so the formulas exist exactly once.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <variant>

#if defined(__CUDACC__)
#define DIT_HD __host__ __device__ __forceinline__
#else
#define DIT_HD inline
#endif

namespace dit::math {

// exp(x) in float. On the device, the hardware expf. On the host, Cody-Waite range reduction and
// Cephes' degree-6 polynomial (relative error < 2e-7 over the float range) in plain arithmetic,
// so that elementwise loops vectorize (libm's expf/tanhf calls do not).
DIT_HD float exp_f32(float x) {
#if defined(__CUDA_ARCH__)
  return expf(x);
#else
  x = x < -87.3f ? -87.3f : (x > 88.3f ? 88.3f : x);
  const float fx = std::floor(x * 1.44269504088896341f + 0.5f);
  x -= fx * 0.693359375f;
  x -= fx * -2.12194440e-4f;
  const float z = x * x;
  float y = 1.9875691500e-4f;
  y = y * x + 1.3981999507e-3f;
  y = y * x + 8.3334519073e-3f;
  y = y * x + 4.1665795894e-2f;
  y = y * x + 1.6666665459e-1f;
  y = y * x + 5.0000001201e-1f;
  y = y * z + x + 1.f;
  const std::int32_t bits = (static_cast<std::int32_t>(fx) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return y * scale;
#endif
}

// tanh(u) = 1 - 2 / (exp(2u) + 1); |u| is capped at 10, where tanh is 1 to float precision.
DIT_HD float tanh_f32(float u) {
#if defined(__CUDA_ARCH__)
  return tanhf(u);
#else
  u = u < -10.f ? -10.f : (u > 10.f ? 10.f : u);
  return 1.f - 2.f / (exp_f32(2.f * u) + 1.f);
#endif
}

// The softmax backward of one score given its probability p, the upstream gradient dp of p, and
// its row's delta = sum_j p_j dp_j (= rowsum(dO o O) in attention): ds = p (dp - delta).
DIT_HD float softmax_grad(float p, float dp, float delta) { return p * (dp - delta); }

// GELU with the tanh approximation (nn.GELU(approximate="tanh"), used by DiT's MLP):
//   gelu(x) = 0.5 x (1 + tanh(k (x + a x^3))),  k = sqrt(2/pi), a = 0.044715
struct GeluTanh {
  static constexpr float kK = 0.7978845608028654f;
  static constexpr float kA = 0.044715f;
  DIT_HD static float forward(float x) {
    float u = kK * (x + kA * x * x * x);
    return 0.5f * x * (1.f + tanh_f32(u));
  }
  // d gelu / dx = 0.5 (1 + th) + 0.5 x (1 - th^2) k (1 + 3 a x^2)
  DIT_HD static float derivative(float x) {
    float u = kK * (x + kA * x * x * x);
    float th = tanh_f32(u);
    return 0.5f * (1.f + th) + 0.5f * x * (1.f - th * th) * kK * (1.f + 3.f * kA * x * x);
  }
};

// SiLU(x) = x * sigmoid(x); d/dx = s (1 + x (1 - s))
struct Silu {
  DIT_HD static float forward(float x) { return x / (1.f + exp_f32(-x)); }
  DIT_HD static float derivative(float x) {
    float s = 1.f / (1.f + exp_f32(-x));
    return s * (1.f + x * (1.f - s));
  }
};

// ReLU(x) = max(x, 0), forward only (the frozen image networks: Inception-V3).
struct Relu {
  DIT_HD static float forward(float x) { return x > 0.f ? x : 0.f; }
};

// One output index `o` of a bilinear resize of an axis of `in` samples to `out`, as PyTorch's
// upsample_bilinear2d (align_corners=False) computes it in float: the source coordinate
// (o + 0.5) in / out - 0.5, clamped at 0, falls between samples i0 and i1 (i1 = i0 at the last
// sample) with weights w0 = 1 - lambda and w1 = lambda. An axis of equal size is copied.
struct BilinearTap {
  int i0, i1;
  float w0, w1;
};
DIT_HD BilinearTap bilinear_tap(int o, int in, int out) {
  if (in == out) return {o, o, 1.f, 0.f};
  const float scale = static_cast<float>(in) / static_cast<float>(out);
  const float raw = scale * (static_cast<float>(o) + 0.5f) - 0.5f;
  const float src = raw > 0.f ? raw : 0.f;
  const int truncated = static_cast<int>(src);
  const int i = truncated < in - 1 ? truncated : in - 1;
  const float d = src - static_cast<float>(i);
  const float lambda = d < 0.f ? 0.f : (d > 1.f ? 1.f : d);
  return {i, i + (i < in - 1 ? 1 : 0), 1.f - lambda, lambda};
}

// LightningDiT's SwiGLU gate h = SiLU(a) * b (a, b the two halves of w12's output) and its
// gradients da = dh b SiLU'(a), db = dh SiLU(a).
struct SiluGate {
  DIT_HD static float forward(float a, float b) { return Silu::forward(a) * b; }
  DIT_HD static void backward(float a, float b, float dh, float& da, float& db) {
    da = dh * b * Silu::derivative(a);
    db = dh * Silu::forward(a);
  }
};

// 1 / sqrt(mean + eps): the reciprocal standard deviation of LayerNorm (mean = the variance) and
// RMSNorm (mean = the mean square).
DIT_HD float norm_rstd(double mean, float eps) { return static_cast<float>(1.0 / sqrt(mean + eps)); }

// GroupNorm's output for one value: (x - mean) rstd gamma + beta, then SiLU when `silu` (the
// norm-then-activation of a VAE ResNet block). mean and rstd are the group's (norm_rstd of its
// biased variance).
DIT_HD float group_norm_out(float x, float mean, float rstd, float gamma, float beta, bool silu) {
  const float y = (x - mean) * rstd * gamma + beta;
  return silu ? Silu::forward(y) : y;
}

// The backward of one normalized row xhat = (x - mu) r (LayerNorm) or x r (RMSNorm, centered =
// false) given g = dL/dxhat, the row means mean_g = mean(g) and mean_gx = mean(g xhat):
//   dx = r (g - mean_g - xhat mean_gx)     (RMSNorm: without the mean_g term)
DIT_HD float norm_dx(float g, float xhat, float rstd, float mean_g, float mean_gx, bool centered) {
  return rstd * (g - (centered ? mean_g : 0.f) - xhat * mean_gx);
}

// LightningDiT's 2-D axial rotary embedding (EVA-02's VisionRotaryEmbeddingFast with
// dim = E/2, pt_seq_len = the token grid): head dims (2p, 2p+1) form pair p of E/2 pairs; pairs
// [0, E/4) rotate by the token's grid row, pairs [E/4, E/2) by its column, at frequency
// 10000^(-k / (E/4)) for k = p mod E/4. Tokens are row-major over the grid.
DIT_HD float rope_angle(int token, int pair, int grid, int head_dim) {
  const int quarter = head_dim / 4;
  const int pos = pair < quarter ? token / grid : token % grid;
  const int k = pair < quarter ? pair : pair - quarter;
  return static_cast<float>(pos) * powf(10000.f, -static_cast<float>(k) / static_cast<float>(quarter));
}
// (y0, y1) = (x0 cos - x1 sin, x1 cos + x0 sin): rotate_half's pairing (out[2p] = -x[2p+1]).
// The backward is the same rotation by -angle (sin negated).
DIT_HD void rope_rotate(float x0, float x1, float c, float s, float& y0, float& y1) {
  y0 = x0 * c - x1 * s;
  y1 = x1 * c + x0 * s;
}

// adaLN modulation of a normalized activation: y = xn * (1 + scale) + shift
DIT_HD float modulate(float xn, float shift, float scale) { return xn * (1.f + scale) + shift; }

// Hyper-parameters of one AdamW step, with the bias corrections precomputed on the host:
// bc1 = 1 - beta1^t, bc2 = 1 - beta2^t.
// grad_scale multiplies the stored gradient as it is read: 1 / (dp ranks x loss scale) times the
// clipping factor, so 16-bit gradients are never rescaled in their own precision.
struct AdamWParams {
  float lr, beta1, beta2, eps, weight_decay, bc1, bc2;
  float grad_scale = 1.f;
};

// One AdamW update of a single element (torch.optim.AdamW semantics: decoupled weight decay
// applied to the parameter before the Adam step).
DIT_HD void adamw_update(float& p, float g, float& m, float& v, const AdamWParams& h) {
  g *= h.grad_scale;
  p -= h.lr * h.weight_decay * p;
  m = h.beta1 * m + (1.f - h.beta1) * g;
  v = h.beta2 * v + (1.f - h.beta2) * g * g;
  float denom = sqrtf(v / h.bc2) + h.eps;
  p -= (h.lr / h.bc1) * m / denom;
}

// Exponential moving average: ema = decay * ema + (1 - decay) * p
DIT_HD float ema_update(float ema, float p, float decay) { return decay * ema + (1.f - decay) * p; }

// ---- the DiT training loss, per element (diffusion/losses.cpp is the float64 reference with the
// derivations; this is the same math for the backends' loss kernels, in double) -------------------

// One row of the schedule table a loss kernel reads at the sample's schedule index t.
enum LossCoef : int {
  kSqrtAlphasCumprod = 0,   // sqrt(abar_t)
  kSqrtOneMinusAlphasCumprod,  // sqrt(1 - abar_t)
  kSqrtRecipAlphasCumprod,  // 1 / sqrt(abar_t)
  kSqrtRecipm1AlphasCumprod,  // sqrt(1 / abar_t - 1)
  kPosteriorMeanCoef1,      // of x_0
  kPosteriorMeanCoef2,      // of x_t
  kLogBeta,                 // log beta_t: the learned range's top
  kPosteriorLogVarClipped,  // its bottom, and the true posterior's log variance
  kIsFirstStep,             // 1 at t = 0 (the decoder likelihood), else 0
  kLossWeight,              // the MSE term's weight (Min-SNR: min(SNR, gamma) / SNR), else 1
  kNumLossCoefs
};

// What the diffusion loss computes (EpsilonLoss, VelocityLoss below; diffusion/losses.h and
// diffusion/objective.h are the float64 references).
enum class LossTarget : std::uint8_t {
  Epsilon,   // DDPM: the output's first C channels predict the noise
  Velocity,  // flow (SiT's linear path): the output predicts u = data - noise
};
enum class LossVariance : std::uint8_t { Fixed, Learned };  // Learned: channels [C, 2C) train the VB term
enum class LossWeighting : std::uint8_t { None, Table };     // Table: the MSE term times the row's kLossWeight
enum class LossCosine : std::uint8_t { No, Yes };            // flow: + 1 - cos(v, u) over channels per pixel
struct LossKind {
  LossTarget target = LossTarget::Epsilon;
  LossVariance variance = LossVariance::Fixed;
  LossWeighting weighting = LossWeighting::None;
  LossCosine cosine = LossCosine::No;
  DIT_HD bool learn_sigma() const { return variance == LossVariance::Learned; }
  DIT_HD int out_factor() const { return learn_sigma() ? 2 : 1; }  // output channels per data channel
};

struct LossElement {
  double mse, vb;      // (noise - eps)^2 and the VB term in nats, of this element
  double d_eps, d_v;   // d mse / d eps and d vb / d v (v: the raw variance output)
};

DIT_HD double approx_cdf(double x) {
  return 0.5 * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}
DIT_HD double approx_pdf(double x) {
  const double th = tanh(0.7978845608028654 * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 - th * th) * 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * x * x);
}

// -log p(x0 | x1) of the discretized Gaussian decoder and its derivative in log_scale.
DIT_HD void decoder_nll(double x, double mean, double log_scale, double& nll, double& d_log_scale) {
  const double floor = 1e-12, half_bin = 1.0 / 255.0;
  const double inv = exp(-log_scale);
  const double plus = inv * (x - mean + half_bin), minus = inv * (x - mean - half_bin);
  const double cdf_plus = approx_cdf(plus), cdf_minus = approx_cdf(minus);
  double prob, dprob;  // the bin's probability and d prob / d log_scale
  if (x < -0.999) {
    prob = cdf_plus, dprob = -approx_pdf(plus) * plus;
  } else if (x > 0.999) {
    prob = 1.0 - cdf_minus, dprob = approx_pdf(minus) * minus;
  } else {
    prob = cdf_plus - cdf_minus, dprob = approx_pdf(minus) * minus - approx_pdf(plus) * plus;
  }
  nll = -log(prob > floor ? prob : floor);
  d_log_scale = prob < floor ? 0.0 : -dprob / prob;
}

// The loss terms of one element: eps and v the model's outputs, x0 the data, noise the epsilon,
// c the schedule row. Without a learned variance only mse and d_eps are meaningful.
DIT_HD LossElement loss_element(double eps, double v, double x0, double noise, const float* c,
                                bool learn_sigma) {
  LossElement e{};
  const double d = noise - eps;
  e.mse = d * d;
  e.d_eps = -2.0 * d;
  if (!learn_sigma) return e;
  const double x_t = c[kSqrtAlphasCumprod] * x0 + c[kSqrtOneMinusAlphasCumprod] * noise;
  const double x0_pred = c[kSqrtRecipAlphasCumprod] * x_t - c[kSqrtRecipm1AlphasCumprod] * eps;
  const double model_mean = c[kPosteriorMeanCoef1] * x0_pred + c[kPosteriorMeanCoef2] * x_t;
  const double max_log = c[kLogBeta], min_log = c[kPosteriorLogVarClipped];
  const double frac = (v + 1.0) / 2.0;
  const double lv = frac * max_log + (1.0 - frac) * min_log;
  double dterm_dlv;
  if (c[kIsFirstStep] != 0.f) {
    double d_log_scale;
    decoder_nll(x0, model_mean, 0.5 * lv, e.vb, d_log_scale);
    dterm_dlv = 0.5 * d_log_scale;
  } else {  // KL(q(x_{t-1} | x_t, x_0) || p(x_{t-1} | x_t)), the true log variance min_log
    const double true_mean = c[kPosteriorMeanCoef1] * x0 + c[kPosteriorMeanCoef2] * x_t;
    const double dm = true_mean - model_mean;
    e.vb = 0.5 * (-1.0 + lv - min_log + exp(min_log - lv) + dm * dm * exp(-lv));
    dterm_dlv = 0.5 * (1.0 - exp(min_log - lv) - dm * dm * exp(-lv));
  }
  e.d_v = dterm_dlv * (max_log - min_log) / 2.0;
  return e;
}

// ---- output distillation (TinyFusion's training_losses_kd_rep) per element --------------------

// One element's output-distillation terms: (s - te)^2 of the student's and teacher's predictions
// (eps or velocity) and, with learned variances, the VB term of the student against the teacher:
// KL(p_teacher(x_{t-1} | x_t) || p_student(x_{t-1} | x_t)) in nats, both means from detached
// eps, or at t = 0 the student's decoder NLL (the reference's th.where(t == 0, decoder_nll, kl)).
struct KdElement {
  double sq, vb;     // (s - te)^2 and the VB term in nats
  double d_s, d_sv;  // d sq / d s and d vb / d sv (sv: the student's raw variance output)
};
DIT_HD KdElement kd_element(double s, double sv, double te, double tv, double x0, double noise, const float* c,
                            bool learn_sigma) {
  KdElement e{};
  const double d = s - te;
  e.sq = d * d;
  e.d_s = 2.0 * d;
  if (!learn_sigma) return e;
  const double x_t = c[kSqrtAlphasCumprod] * x0 + c[kSqrtOneMinusAlphasCumprod] * noise;
  const auto mean_of = [&](double eps) {
    const double x0_pred = c[kSqrtRecipAlphasCumprod] * x_t - c[kSqrtRecipm1AlphasCumprod] * eps;
    return c[kPosteriorMeanCoef1] * x0_pred + c[kPosteriorMeanCoef2] * x_t;
  };
  const double max_log = c[kLogBeta], min_log = c[kPosteriorLogVarClipped];
  const auto logvar_of = [&](double v) { return (v + 1.0) / 2.0 * max_log + (1.0 - (v + 1.0) / 2.0) * min_log; };
  const double s_mean = mean_of(s), s_lv = logvar_of(sv);
  double dterm_dlv;
  if (c[kIsFirstStep] != 0.f) {
    double d_log_scale;
    decoder_nll(x0, s_mean, 0.5 * s_lv, e.vb, d_log_scale);
    dterm_dlv = 0.5 * d_log_scale;
  } else {
    const double t_mean = mean_of(te), t_lv = logvar_of(tv), dm = t_mean - s_mean;
    e.vb = 0.5 * (-1.0 + s_lv - t_lv + exp(t_lv - s_lv) + dm * dm * exp(-s_lv));
    dterm_dlv = 0.5 * (1.0 - exp(t_lv - s_lv) - dm * dm * exp(-s_lv));
  }
  e.d_sv = dterm_dlv * (max_log - min_log) / 2.0;
  return e;
}

// ---- the flow loss (SiT's velocity MSE and LightningDiT's cosine term) per pixel ---------------

// One pixel's share of a sample's flow loss: the sum over its channels of (v - u)^2 and, with the
// cosine term, 1 - cos(v, u) (torch cosine_similarity over channels, norms clamped to 1e-8).
struct FlowPixel {
  double sq, one_minus_cos;
};
// v(j) reads the model output at element j of the sample (channel k of this pixel at j = q + k hw),
// x and e its data and noise (u = x - e), store(j, g) writes d loss / d v: mse_scale * 2 (v - u)
// plus, with the cosine term, cos_scale * -(u / (|v| |u|) - cos v / |v|^2).
template <class V, class Store>
DIT_HD FlowPixel flow_pixel(const V& v, const float* x, const float* e, std::int64_t q, std::int64_t channels,
                            std::int64_t hw, LossCosine cosine, double mse_scale, double cos_scale,
                            const Store& store) {
  double sq = 0, vu = 0, vv = 0, uu = 0;
  for (std::int64_t k = 0; k < channels; ++k) {
    const std::int64_t j = q + k * hw;
    const double vj = v(j), u = static_cast<double>(x[j]) - static_cast<double>(e[j]);
    sq += (vj - u) * (vj - u);
    vu += vj * u, vv += vj * vj, uu += u * u;
  }
  if (cosine == LossCosine::No) {
    for (std::int64_t k = 0; k < channels; ++k) {
      const std::int64_t j = q + k * hw;
      store(j, mse_scale * 2.0 * (v(j) - (static_cast<double>(x[j]) - static_cast<double>(e[j]))));
    }
    return {sq, 0.0};
  }
  const double nv = sqrt(vv) > 1e-8 ? sqrt(vv) : 1e-8, nu = sqrt(uu) > 1e-8 ? sqrt(uu) : 1e-8;
  const double cs = vu / (nv * nu);
  for (std::int64_t k = 0; k < channels; ++k) {
    const std::int64_t j = q + k * hw;
    const double vj = v(j), u = static_cast<double>(x[j]) - static_cast<double>(e[j]);
    store(j, mse_scale * 2.0 * (vj - u) - cos_scale * (u / (nv * nu) - cs * vj / (nv * nv)));
  }
  return {sq, 1.0 - cs};
}


// ---- per-sample losses: the closed list behind Backend::sample_loss ----------------------------
//
// A recipe's loss is one struct of scalars here (the same on host and device) that a backend
// applies to every sample of a microbatch through its one entry point, Backend::sample_loss. It has
//   kName               its name in messages
//   kPasses             reductions over a sample's items before its terms (the feature loss needs
//                       3: the means, the deviations, the loss); kTerms: floats of its terms row
//   shape()             the per-sample sizes of the tensors it reads (the backend checks them)
//   items()             the items each pass visits (elements; pixels for the flow loss)
//   uses_row()          whether it reads the sample's schedule row c (else c is null)
//   item(pass, s, j, c, done, acc)   item j's share of pass `pass` added to acc (done: the
//                       earlier passes' sums); the last pass also writes the gradient
//   finish(s, c, done)  the sample's terms from every pass's sums
// s is the backend's view of one sample: s.a(k) and s.b(k) read the model's tensors (the output
// and the teacher's, or the student's and teacher's features) as float, s.g(k) reads and
// s.set_g(k, v) writes the gradient (all three in the storage dtype), s.x0 and s.noise point at
// the sample's fp32 data and noise, s.terms at its terms row. The CPU runs each pass's items in
// order, one sample per thread; the GPU strides them over a block and sums the block. A new loss
// is a struct here and one entry in SampleLoss: no Backend method, no backend file.

struct LossSums {
  double a = 0, b = 0;
};
// The per-sample sizes a loss reads: a and its gradient, b (0: none), x0 and noise (0: none).
struct LossShape {
  std::int64_t a, b, x;
  int terms;
  bool uses_row;
};

inline constexpr double kInvLn2 = 1.0 / 0.6931471805599453;  // nats to bits

// flow_pixel's reader and writer of one sample's output and gradient.
template <class S>
struct SampleOut {
  const S& s;
  DIT_HD double operator()(std::int64_t j) const { return static_cast<double>(s.a(j)); }
};
template <class S>
struct SampleGrad {
  const S& s;
  DIT_HD void operator()(std::int64_t j, double d) const { s.set_g(j, d); }
};

// DDPM, epsilon prediction (diffusion/losses.h is the float64 reference): mse of the first C
// channels against the noise, times the row's kLossWeight with LossWeighting::Table, plus the VB
// term with LossVariance::Learned. g = grad_inv d loss / d out; terms (loss, mse, vb in bits/dim).
struct EpsilonLoss {
  static constexpr const char* kName = "diffusion loss (epsilon)";
  static constexpr int kPasses = 1, kTerms = 3;
  std::int64_t p;   // elements of a sample's data (C H W)
  LossKind kind;
  double grad_inv;  // grad_scale / (p N)
  LossShape shape() const { return {kind.out_factor() * p, 0, p, kTerms, true}; }
  DIT_HD std::int64_t items() const { return p; }
  DIT_HD bool uses_row() const { return true; }
  DIT_HD double weight(const float* c) const { return kind.weighting == LossWeighting::Table ? c[kLossWeight] : 1.0; }
  template <class S>
  DIT_HD void item(int, const S& s, std::int64_t j, const float* c, const LossSums*, LossSums& acc) const {
    const bool learn_sigma = kind.learn_sigma();
    const LossElement le = loss_element(s.a(j), learn_sigma ? s.a(p + j) : 0.0, s.x0[j], s.noise[j], c, learn_sigma);
    acc.a += le.mse;
    acc.b += le.vb;
    s.set_g(j, grad_inv * weight(c) * le.d_eps);
    if (learn_sigma) s.set_g(p + j, grad_inv * le.d_v * kInvLn2);
  }
  template <class S>
  DIT_HD void finish(const S& s, const float* c, const LossSums* done) const {
    const double m = done[0].a / static_cast<double>(p);
    const double v = kind.learn_sigma() ? done[0].b / static_cast<double>(p) * kInvLn2 : 0.0;
    s.terms[0] = static_cast<float>(weight(c) * m + v), s.terms[1] = static_cast<float>(m);
    s.terms[2] = static_cast<float>(v);
  }
};

// Flow, velocity prediction (diffusion/objective.h): mse against u = x0 - noise, plus 1 - cos over
// channels per pixel with LossCosine::Yes (flow_pixel, one item per pixel). terms (loss, mse, cos).
struct VelocityLoss {
  static constexpr const char* kName = "diffusion loss (velocity)";
  static constexpr int kPasses = 1, kTerms = 3;
  std::int64_t channels, hw;
  LossCosine cosine;
  double mse_scale, cos_scale;  // grad_scale / (C hw N), grad_scale / (hw N)
  LossShape shape() const { return {channels * hw, 0, channels * hw, kTerms, true}; }
  DIT_HD std::int64_t items() const { return hw; }
  DIT_HD bool uses_row() const { return true; }
  template <class S>
  DIT_HD void item(int, const S& s, std::int64_t q, const float*, const LossSums*, LossSums& acc) const {
    const FlowPixel px =
        flow_pixel(SampleOut<S>{s}, s.x0, s.noise, q, channels, hw, cosine, mse_scale, cos_scale, SampleGrad<S>{s});
    acc.a += px.sq;
    acc.b += px.one_minus_cos;
  }
  template <class S>
  DIT_HD void finish(const S& s, const float*, const LossSums* done) const {
    const double m = done[0].a / static_cast<double>(channels * hw);
    const double c = cosine == LossCosine::Yes ? done[0].b / static_cast<double>(hw) : 0.0;
    s.terms[0] = static_cast<float>(m + c), s.terms[1] = static_cast<float>(m), s.terms[2] = static_cast<float>(c);
  }
};

// Output distillation (TinyFusion's training_losses_kd_rep; tools/distill_golden.py is the
// float64 reference) of the student's output a against the teacher's b (kd_element per element): g +=
// grad_inv d kd / d out; terms (kd mse, kd vb in bits/dim).
struct OutputKdLoss {
  static constexpr const char* kName = "output distillation";
  static constexpr int kPasses = 1, kTerms = 2;
  std::int64_t p, per_teacher;  // the data's elements; the teacher output's per sample (p or 2p)
  bool learn_sigma;             // both learn the variance: the VB term
  double grad_inv;              // grad_scale / (p N)
  LossShape shape() const { return {(learn_sigma ? 2 : 1) * p, per_teacher, p, kTerms, learn_sigma}; }
  DIT_HD std::int64_t items() const { return p; }
  DIT_HD bool uses_row() const { return learn_sigma; }
  template <class S>
  DIT_HD void item(int, const S& s, std::int64_t j, const float* c, const LossSums*, LossSums& acc) const {
    const KdElement k = kd_element(s.a(j), learn_sigma ? s.a(p + j) : 0.0, s.b(j), learn_sigma ? s.b(p + j) : 0.0,
                                   s.x0[j], s.noise[j], c, learn_sigma);
    acc.a += k.sq;
    acc.b += k.vb;
    s.set_g(j, s.g(j) + grad_inv * k.d_s);
    if (learn_sigma) s.set_g(p + j, s.g(p + j) + grad_inv * k.d_sv * kInvLn2);
  }
  template <class S>
  DIT_HD void finish(const S& s, const float*, const LossSums* done) const {
    s.terms[0] = static_cast<float>(done[0].a / static_cast<double>(p));
    s.terms[1] = static_cast<float>(learn_sigma ? done[0].b / static_cast<double>(p) * kInvLn2 : 0.0);
  }
};

// Masked feature distillation of the student's hidden state a against the teacher's b (m values
// per sample): values farther than sigma unbiased standard deviations from the sample's mean are
// zeroed in each (sigma = 0: none; the masks held constant), loss = mean (ms a - mt b)^2. g =
// grad_inv d loss / d a (written); terms (1) += loss.
struct FeatureKdLoss {
  static constexpr const char* kName = "feature distillation";
  static constexpr int kPasses = 3, kTerms = 1;
  std::int64_t m;
  double sigma, grad_inv;  // grad_inv = grad_scale / (m N)
  LossShape shape() const { return {m, m, 0, kTerms, false}; }
  DIT_HD std::int64_t items() const { return m; }
  DIT_HD bool uses_row() const { return false; }
  DIT_HD double mean(double sum) const { return sum / static_cast<double>(m); }
  DIT_HD double bound(double sq) const { return sigma * sqrt(sq / static_cast<double>(m - 1)); }
  template <class S>
  DIT_HD void item(int pass, const S& s, std::int64_t j, const float*, const LossSums* done, LossSums& acc) const {
    if (pass == 0) {  // the sums, for the means
      acc.a += s.a(j), acc.b += s.b(j);
      return;
    }
    const double ms = mean(done[0].a), mt = mean(done[0].b);
    if (pass == 1) {  // the squared deviations (two passes in double: torch.var_mean)
      acc.a += (s.a(j) - ms) * (s.a(j) - ms), acc.b += (s.b(j) - mt) * (s.b(j) - mt);
      return;
    }
    const double bs = bound(done[1].a), bt = bound(done[1].b);
    const float a = s.a(j), b = s.b(j);
    const double ks = sigma <= 0 || fabs(a - ms) < bs ? 1.0 : 0.0;
    const double kt = sigma <= 0 || fabs(b - mt) < bt ? 1.0 : 0.0;
    const double d = ks * a - kt * b;
    acc.a += d * d;
    s.set_g(j, grad_inv * 2.0 * ks * d);
  }
  template <class S>
  DIT_HD void finish(const S& s, const float*, const LossSums* done) const {
    s.terms[0] = static_cast<float>(s.terms[0] + done[2].a / static_cast<double>(m));
  }
};

// The closed list: Backend::sample_loss takes any of these; each backend dispatches it once.
using SampleLoss = std::variant<EpsilonLoss, VelocityLoss, OutputKdLoss, FeatureKdLoss>;

}  // namespace dit::math
