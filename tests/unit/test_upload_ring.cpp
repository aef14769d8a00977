// The GPU upload ring's bookkeeping (backend/upload_ring.h), on the host: a byte range is handed
// out again only after every copy overlapping it was waited for, slots are reused only after
// their copy completed, and a ring sized for two steps of inputs never makes a step wait for
// the step before it (so the upload path adds no host sync to the 2 a step has).
#include <gtest/gtest.h>

#include <cstddef>
#include <map>
#include <numeric>
#include <vector>

#include "backend/upload_ring.h"
#include "core/error.h"

namespace dit {
namespace {

// A model of the device: which slot holds which byte range, and the step that issued it.
struct Issued {
  std::size_t begin, end;
  int step;
};

// Claims `bytes` and checks the invariants against the model: waited slots were in flight, the
// new range overlaps no copy still in flight, and its slot is not in flight.
// `min_age`: how many steps older than `step` every waited copy must be.
UploadRing::Claim claim_checked(UploadRing& ring, std::map<int, Issued>& live, std::size_t bytes,
                                int step, int min_age = 0) {
  const UploadRing::Claim c = ring.claim(bytes);
  for (int w : c.wait) {
    if (live.count(w) != 1) {
      ADD_FAILURE() << "waited for slot " << w << ", which has no copy in flight";
      continue;
    }
    EXPECT_GE(step - live[w].step, min_age) << "waited for a copy of step " << live[w].step;
    live.erase(w);
  }
  EXPECT_EQ(live.count(c.slot), 0u) << "slot " << c.slot << " reused while its copy is in flight";
  const std::size_t end = c.offset + (bytes + UploadRing::kAlign - 1) / UploadRing::kAlign * UploadRing::kAlign;
  EXPECT_LE(end, ring.capacity());
  EXPECT_EQ(c.offset % UploadRing::kAlign, 0u);
  for (const auto& [slot, r] : live)
    EXPECT_FALSE(c.offset < r.end && r.begin < end)
        << "range [" << c.offset << ", " << end << ") overwrites slot " << slot << "'s copy in flight";
  live[c.slot] = {c.offset, end, step};
  return c;
}

// Sized for two steps of a step's inputs (latents, timesteps, labels, noise seeds): over many
// steps no claim waits for a copy of the current or the previous step. The step's own sync points
// (loss and grad norm) complete everything older, so the ring adds no wait.
TEST(UploadRing, TwoStepsOfInputsNeverWaitOnTheStepBefore) {
  const std::vector<std::size_t> step_uploads = {32 * 4 * 32 * 32 * 4, 32 * 4, 32 * 4, 1000, 7};
  const std::size_t per_step = std::accumulate(step_uploads.begin(), step_uploads.end(), std::size_t{0}) +
                               step_uploads.size() * UploadRing::kAlign;
  UploadRing ring(2 * per_step + 2 * UploadRing::kAlign * 64, 64);
  std::map<int, Issued> live;
  int waits = 0;
  for (int step = 0; step < 200; ++step)
    for (std::size_t bytes : step_uploads)
      for (std::size_t piece : ring.pieces(bytes)) {
        const UploadRing::Claim c = claim_checked(ring, live, piece, step, 2);
        waits += static_cast<int>(c.wait.size());
      }
  EXPECT_GT(waits, 0) << "the ring never wrapped: the test did not exercise reuse";
  EXPECT_LE(ring.in_flight(), ring.slots());
}

// The check above must be able to fail: a ring of one step's size waits on the step before.
TEST(UploadRing, OneStepOfRingWaitsOnTheStepBefore) {
  const std::size_t bytes = 100 * UploadRing::kAlign;
  UploadRing ring(2 * bytes, 8);  // max piece = one upload: each claim reuses the other half
  std::map<int, Issued> live;
  claim_checked(ring, live, bytes, 0);
  const UploadRing::Claim c = claim_checked(ring, live, bytes, 1);
  EXPECT_TRUE(c.wait.empty());
  const UploadRing::Claim d = claim_checked(ring, live, bytes, 2);
  ASSERT_EQ(d.wait.size(), 1u) << "the third upload reuses the first one's bytes";
}

// More small uploads than slots: the oldest is waited for, one at a time, never a newer one.
TEST(UploadRing, RunningOutOfSlotsWaitsForTheOldest) {
  UploadRing ring(1 << 20, 4);
  std::map<int, Issued> live;
  std::vector<int> order;
  for (int i = 0; i < 4; ++i) order.push_back(claim_checked(ring, live, 10, i).slot);
  for (int i = 4; i < 12; ++i) {
    const UploadRing::Claim c = claim_checked(ring, live, 10, i);
    ASSERT_EQ(c.wait.size(), 1u);
    EXPECT_EQ(c.wait[0], order[i - 4]) << "upload " << i << " waited for a newer copy than the oldest";
    order.push_back(c.slot);
  }
}

// A large upload goes in pieces of at most half the ring, which sum to it; a claim larger than
// that is refused; nothing grows.
TEST(UploadRing, LargeUploadsGoInPiecesAndTheRingNeverGrows) {
  UploadRing ring(4 << 20, 16);
  const std::size_t big = (27 << 20) + 13;
  const std::vector<std::size_t> p = ring.pieces(big);
  EXPECT_EQ(std::accumulate(p.begin(), p.end(), std::size_t{0}), big);
  for (std::size_t x : p) EXPECT_LE(x, ring.max_piece());
  std::map<int, Issued> live;
  for (std::size_t x : p) claim_checked(ring, live, x, 0);
  EXPECT_EQ(ring.capacity(), std::size_t{4} << 20);
  EXPECT_THROW(ring.claim(ring.max_piece() + 1), Error);
  EXPECT_EQ(ring.pieces(0).size(), 1u);  // an empty upload is one empty piece
}

}  // namespace
}  // namespace dit
