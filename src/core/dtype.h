// Element types of tensors: fp32 everywhere, bf16/fp16 for mixed precision on the GPU.
// Conversions here are host-side (round to nearest even) and shared by both backends' tests.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

#include "core/error.h"

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

}  // namespace dit
