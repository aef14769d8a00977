// Elementwise math shared by every backend: each function is compiled for the host (CPU backend,
// references) and for the device (CUDA kernels), so the formulas exist exactly once.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

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

}  // namespace dit::math
