// Chunked bump allocation (Arena) and single owned allocations (Buffer).
#include "core/arena.h"

#include <utility>

namespace dit {

namespace {
constexpr std::size_t kAlign = 256;  // enough for any vector load and for cuBLASLt pointers
std::size_t round_up(std::size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
}  // namespace

Arena::Arena(Allocator& alloc, std::size_t chunk_bytes) : alloc_(&alloc), chunk_bytes_(chunk_bytes) {}

Arena::~Arena() {
  for (auto& c : chunks_) alloc_->deallocate(c.base);
}

void* Arena::allocate(std::size_t bytes) {
  bytes = round_up(bytes ? bytes : 1);
  while (current_ < chunks_.size()) {
    if (offset_ + bytes <= chunks_[current_].size) break;
    ++current_;
    offset_ = 0;
  }
  if (current_ == chunks_.size()) {
    std::size_t size = bytes > chunk_bytes_ ? bytes : chunk_bytes_;
    chunks_.push_back({static_cast<char*>(alloc_->allocate(size)), size});
    offset_ = 0;
  }
  void* p = chunks_[current_].base + offset_;
  offset_ += bytes;
  used_ += bytes;
  if (used_ > peak_) peak_ = used_;
  return p;
}

void Arena::reset() {
  current_ = 0;
  offset_ = 0;
  used_ = 0;
}

std::size_t Arena::reserved_bytes() const {
  std::size_t n = 0;
  for (auto& c : chunks_) n += c.size;
  return n;
}

Buffer::Buffer(Allocator& alloc, std::size_t bytes)
    : alloc_(&alloc), ptr_(alloc.allocate(round_up(bytes ? bytes : 1))), bytes_(bytes) {}

Buffer::~Buffer() {
  if (ptr_) alloc_->deallocate(ptr_);
}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) alloc_->deallocate(ptr_);
    alloc_ = std::exchange(o.alloc_, nullptr);
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

Tensor Buffer::tensor(Shape shape, DType dtype, std::size_t byte_offset) const {
  std::size_t need = byte_offset + static_cast<std::size_t>(shape.numel()) * dtype_size(dtype);
  DIT_CHECK(need <= bytes_, "a view of ", need, " bytes into a buffer of ", bytes_);
  return Tensor{static_cast<char*>(ptr_) + byte_offset, dtype, shape, alloc_->device()};
}

}  // namespace dit
