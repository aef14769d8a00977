// A non-owning view of a dense, row-major tensor: pointer, dtype, shape, and where it lives.
// Views are cheap values; memory is owned by arenas and flat buffers (see arena.h).
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/dtype.h"
#include "core/error.h"

namespace dit {

// Virtual: address space of the planning backend (backend/virtual/virtual_backend.h), never dereferenced.
enum class Device : std::uint8_t { Host, Cuda, Virtual };

constexpr int kMaxDims = 5;

struct Shape {
  std::array<std::int64_t, kMaxDims> dims{};
  int rank = 0;

  Shape() = default;
  Shape(std::initializer_list<std::int64_t> d) {
    DIT_CHECK(d.size() <= kMaxDims, "a shape has at most ", kMaxDims, " dims");
    for (auto v : d) dims[rank++] = v;
  }
  std::int64_t operator[](int i) const { return dims[i < 0 ? rank + i : i]; }
  std::int64_t numel() const {
    std::int64_t n = 1;
    for (int i = 0; i < rank; ++i) n *= dims[i];
    return n;
  }
  bool operator==(const Shape& o) const {
    if (rank != o.rank) return false;
    for (int i = 0; i < rank; ++i)
      if (dims[i] != o.dims[i]) return false;
    return true;
  }
  std::string str() const;  // "(3, 4, 8, 8)"
};

struct Tensor {
  void* data = nullptr;
  DType dtype = DType::F32;
  Shape shape;
  Device device = Device::Host;

  std::int64_t numel() const { return shape.numel(); }
  std::size_t bytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype); }
  std::int64_t dim(int i) const { return shape[i]; }

  template <typename T>
  T* as() const { return static_cast<T*>(data); }
  float* f32() const {
    DIT_CHECK(dtype == DType::F32, "expected an fp32 tensor, got ", dtype_name(dtype));
    return static_cast<float*>(data);
  }
  // A view of the same memory with another shape of equal numel.
  Tensor view(Shape s) const {
    DIT_CHECK(s.numel() == numel(), "view ", s.str(), " of a tensor of shape ", shape.str());
    return Tensor{data, dtype, s, device};
  }
  // Rows [begin, begin + count) along dim 0, kept contiguous.
  Tensor rows(std::int64_t begin, std::int64_t count) const;
};

}  // namespace dit
