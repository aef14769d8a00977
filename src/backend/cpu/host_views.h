// Internal to the CPU backend (cpu/): checked views of the tensors its primitives read, shared by
// the files that implement them (cpu_backend.cpp, block_ops.cpp).
#pragma once

#include <cstdint>

#include "backend/backend.h"
#include "core/error.h"

namespace dit::cpu {

// Checks that a view is an fp32 host tensor; returns its data.
inline float* host_f32(const Tensor& t, const char* what) {
  DIT_CHECK(t.device == Device::Host, what, ": the CPU backend needs host tensors");
  DIT_CHECK(t.dtype == DType::F32, what, ": the CPU backend computes in fp32, got ", dtype_name(t.dtype));
  return static_cast<float*>(t.data);
}

// (N, T, D) geometry of an activation and of the (N, K*D) modulation it is paired with.
struct TokenGeom {
  std::int64_t n, t, d;
};
inline TokenGeom token_geom(const Tensor& x, const ModChunk& m, const char* what) {
  DIT_CHECK(x.shape.rank == 3, what, ": expected (N, T, D), got ", x.shape.str());
  TokenGeom g{x.dim(0), x.dim(1), x.dim(2)};
  DIT_CHECK(m.mod.shape.rank == 2 && m.mod.dim(0) == g.n && m.mod.dim(1) % g.d == 0 && m.index >= 0 &&
                m.index < m.mod.dim(1) / g.d,
            what, ": modulation ", m.mod.shape.str(), " chunk ", m.index, " does not fit x ", x.shape.str());
  return g;
}

// Pointer to row n of chunk m.index of the modulation tensor.
inline float* chunk_row(const ModChunk& m, std::int64_t n, std::int64_t d) {
  return host_f32(m.mod, "modulation") + n * m.mod.dim(1) + m.index * d;
}

}  // namespace dit::cpu
