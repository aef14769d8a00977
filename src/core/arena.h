// Memory arenas: bump allocation from large chunks obtained once from a backend allocator.
// One arena per in-flight microbatch holds the activations saved for backward; a scratch arena
// holds temporaries. reset() keeps the chunks, so after the first step nothing is allocated.
#pragma once

#include <cstddef>
#include <vector>

#include "core/tensor.h"

namespace dit {

// Raw memory of one device; implemented by each backend.
class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void deallocate(void* p) = 0;
  virtual Device device() const = 0;
  // Memory an allocation can hand back while it lives (ZeRO-2/3 release the parameters and gradients
  // a rank does not hold, optim/zero.h): the size of a page, and release_pages, which gives the
  // whole pages inside [p, p + bytes) back; they read as zeros when next touched. False where the
  // allocator cannot: the memory and its contents stay.
  virtual std::size_t page_bytes() const { return 4096; }
  virtual bool release_pages(void* /*p*/, std::size_t /*bytes*/) { return false; }
  virtual bool can_release_pages() const { return false; }
};

class Arena {
 public:
  explicit Arena(Allocator& alloc, std::size_t chunk_bytes = 16u << 20);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  void* allocate(std::size_t bytes);
  Tensor tensor(Shape shape, DType dtype) {
    return Tensor{allocate(static_cast<std::size_t>(shape.numel()) * dtype_size(dtype)), dtype,
                  shape, alloc_->device()};
  }
  // Forget every allocation; the chunks are kept for reuse.
  void reset();
  // Scoped reuse: everything allocated after mark() is released by rewind(mark).
  struct Mark {
    std::size_t chunk, offset, used;
  };
  Mark mark() const { return {current_, offset_, used_}; }
  void rewind(const Mark& m) {
    current_ = m.chunk;
    offset_ = m.offset;
    used_ = m.used;
  }
  std::size_t peak_bytes() const { return peak_; }
  std::size_t reserved_bytes() const;

 private:
  struct Chunk {
    char* base;
    std::size_t size;
  };
  Allocator* alloc_;
  std::size_t chunk_bytes_;
  std::vector<Chunk> chunks_;
  std::size_t current_ = 0;  // index of the chunk being filled
  std::size_t offset_ = 0;   // bytes used in that chunk
  std::size_t used_ = 0, peak_ = 0;
};

// Owns one allocation of a backend; used for flat parameter/gradient/optimizer buffers.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Allocator& alloc, std::size_t bytes);
  ~Buffer();
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return ptr_; }
  std::size_t bytes() const { return bytes_; }
  Tensor tensor(Shape shape, DType dtype, std::size_t byte_offset = 0) const;

 private:
  Allocator* alloc_ = nullptr;
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace dit
