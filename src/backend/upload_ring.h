// The bookkeeping of the GPU's pinned upload ring, host-only so it is tested without a GPU: a
// fixed buffer (allocated once, at start) in which each upload takes the next byte range and
// one of a fixed set of slots, each slot with its own completion event on the device. A range
// is written again only after every earlier upload overlapping it has completed: claim() names
// exactly those slots, so the host waits (rarely) for an old copy, never for the whole queue,
// and nothing is allocated or freed after construction. An upload larger than half the ring goes
// in pieces (pieces()), each a claim of its own.
#pragma once

#include <cstddef>
#include <vector>

namespace dit {

class UploadRing {
 public:
  static constexpr std::size_t kAlign = 256;  // each upload starts on this boundary

  // `capacity` bytes of ring; `slots` uploads (events) in flight at most.
  UploadRing(std::size_t capacity, int slots);

  struct Claim {
    std::size_t offset;     // where in the ring the bytes go
    int slot;               // whose event the caller records after issuing the copy
    std::vector<int> wait;  // slots whose copies must have completed before the bytes are written
  };
  // The range and slot for an upload of `bytes` (<= max_piece()). The slots in `wait` are free
  // again once the caller has waited for them.
  Claim claim(std::size_t bytes);

  // The largest single claim: half the ring, so an upload never waits for the one before it.
  std::size_t max_piece() const { return capacity_ / 2 / kAlign * kAlign; }
  // How an upload of `bytes` is cut into claims of at most max_piece() bytes.
  std::vector<std::size_t> pieces(std::size_t bytes) const;

  std::size_t capacity() const { return capacity_; }
  int slots() const { return static_cast<int>(free_.size() + live_.size()); }
  int in_flight() const { return static_cast<int>(live_.size()); }

 private:
  struct Live {
    std::size_t begin, end;
    int slot;
  };
  void retire(std::size_t index, std::vector<int>& wait);

  std::size_t capacity_;
  std::size_t head_ = 0;      // where the next upload starts
  std::vector<Live> live_;    // uploads that may still be copying, oldest first
  std::vector<int> free_;     // slots without an upload
};

}  // namespace dit
