// Element types of tensors: fp32 everywhere, bf16/fp16 for mixed precision on the GPU.
// Conversions here are host-side (round to nearest even) and shared by both backends' tests.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "core/error.h"
#include "core/named.h"

namespace dit {

// I32 holds labels and other indices; the float types hold data.
enum class DType : std::uint8_t { F32, BF16, F16, I32 };

constexpr std::size_t dtype_size(DType t) { return (t == DType::F32 || t == DType::I32) ? 4 : 2; }

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "fp32";
    case DType::BF16: return "bf16";
    case DType::F16: return "fp16";
    case DType::I32: return "int32";
  }
  return "?";
}

DType parse_dtype(std::string_view name);  // "fp32" | "bf16" | "fp16"; throws naming the choices

// train.precision: the storage dtype of params, activations and grads.
inline constexpr Named<DType> kPrecisionNames[] = {{DType::F32, "fp32"}, {DType::BF16, "bf16"}, {DType::F16, "fp16"}};
// train.grad_reduce: the dtype of the data-parallel gradient reduction.
inline constexpr Named<DType> kGradReduceNames[] = {{DType::F32, "fp32"}, {DType::BF16, "bf16"}};

// bf16 storage as raw bits; round to nearest even, NaN stays NaN.
inline std::uint16_t float_to_bf16_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}
inline float bf16_bits_to_float(std::uint16_t b) {
  std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// IEEE binary16 (fp16) storage as raw bits; round to nearest even, overflow to +-inf, gradual
// underflow through the subnormals, NaN stays NaN.
inline std::uint16_t float_to_f16_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  const std::uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);  // NaN
  if (a >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // >= 65520: inf
  if (a < 0x38800000u) {  // below 2^-14: a multiple of 2^-24, exact after scaling, rounded to even
    float mag;
    std::memcpy(&mag, &a, 4);
    return static_cast<std::uint16_t>(sign | static_cast<std::uint32_t>(std::nearbyint(mag * 16777216.0f)));
  }
  std::uint32_t v = a - 0x38000000u;  // rebias the exponent from 127 to 15
  v += 0xfffu + ((v >> 13) & 1u);     // round the 23-bit mantissa to 10 bits, ties to even
  return static_cast<std::uint16_t>(sign | (v >> 13));
}
inline float f16_bits_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) {  // zero or subnormal: m * 2^-24
    const float f = static_cast<float>(m) * 5.9604644775390625e-8f;
    return sign ? -f : f;
  }
  const std::uint32_t u = sign | (e == 31 ? 0x7f800000u | (m << 13) : ((e + 112u) << 23) | (m << 13));
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Element i of host storage of a float dtype, as fp32; and the rounding store back.
inline float load_as_f32(const void* p, DType t, std::int64_t i) {
  switch (t) {
    case DType::F32: return static_cast<const float*>(p)[i];
    case DType::BF16: return bf16_bits_to_float(static_cast<const std::uint16_t*>(p)[i]);
    case DType::F16: return f16_bits_to_float(static_cast<const std::uint16_t*>(p)[i]);
    case DType::I32: break;
  }
  DIT_FAIL("no conversion from ", dtype_name(t), " to fp32");
}
inline void store_from_f32(void* p, DType t, std::int64_t i, float v) {
  switch (t) {
    case DType::F32: static_cast<float*>(p)[i] = v; return;
    case DType::BF16: static_cast<std::uint16_t*>(p)[i] = float_to_bf16_bits(v); return;
    case DType::F16: static_cast<std::uint16_t*>(p)[i] = float_to_f16_bits(v); return;
    case DType::I32: break;
  }
  DIT_FAIL("no conversion from fp32 to ", dtype_name(t));
}

}  // namespace dit
