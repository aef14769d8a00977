// The upload ring's bookkeeping (see upload_ring.h).
#include "backend/upload_ring.h"

#include <algorithm>

#include "core/error.h"

namespace dit {

UploadRing::UploadRing(std::size_t capacity, int slots) : capacity_(capacity / kAlign * kAlign) {
  DIT_CHECK(capacity_ >= 2 * kAlign && slots >= 2, "upload ring: ", capacity, " bytes and ", slots,
            " slots (needs at least ", 2 * kAlign, " bytes and 2 slots)");
  for (int s = slots - 1; s >= 0; --s) free_.push_back(s);
}

void UploadRing::retire(std::size_t index, std::vector<int>& wait) {
  wait.push_back(live_[index].slot);
  free_.push_back(live_[index].slot);
  live_.erase(live_.begin() + static_cast<std::ptrdiff_t>(index));
}

UploadRing::Claim UploadRing::claim(std::size_t bytes) {
  const std::size_t need = std::max<std::size_t>(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
  DIT_CHECK(need <= max_piece(), "upload ring: a piece of ", bytes, " bytes is over the ",
            max_piece(), "-byte limit (cut it with pieces())");
  if (head_ + need > capacity_) head_ = 0;  // the tail is skipped; its uploads stay live
  Claim c{head_, -1, {}};
  const std::size_t end = head_ + need;
  for (std::size_t i = 0; i < live_.size();) {
    if (live_[i].begin < end && head_ < live_[i].end) retire(i, c.wait);
    else ++i;
  }
  if (free_.empty()) retire(0, c.wait);  // every slot in flight: the oldest must finish
  c.slot = free_.back();
  free_.pop_back();
  live_.push_back({head_, end, c.slot});
  head_ = end;
  return c;
}

std::vector<std::size_t> UploadRing::pieces(std::size_t bytes) const {
  std::vector<std::size_t> out;
  const std::size_t piece = max_piece();
  for (std::size_t left = bytes; left > 0; left -= std::min(left, piece)) out.push_back(std::min(left, piece));
  if (out.empty()) out.push_back(0);
  return out;
}

}  // namespace dit
