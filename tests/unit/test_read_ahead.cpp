// The training batches' read-ahead thread (engine/read_ahead.h): the batches it serves are the
// ones BatchSource computes, bit for bit, in order, after a jump (a resumed run) and at any depth;
// a read that fails on the thread fails the step that needs it, with the reader's message; and
// it stops cleanly with reads still queued.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <string>

#include "core/error.h"
#include "diffusion/noise_schedule.h"
#include "engine/batch.h"
#include "engine/read_ahead.h"
#include "io/dataset.h"

namespace dit {

namespace {

bool same(const Microbatch& a, const Microbatch& b) {
  return a.n == b.n && a.first == b.first && a.t == b.t && a.y == b.y && a.time == b.time &&
         a.x_start.size() == b.x_start.size() &&
         std::memcmp(a.x_start.data(), b.x_start.data(), a.x_start.size() * sizeof(float)) == 0;
}

// The synthetic dataset, failing to read one index (as a damaged file would) and counting reads.
class FailingDataset final : public Dataset {
 public:
  FailingDataset(std::int64_t bad) : inner_(SampleShape{1, 8, 8}, 4, 64, 7), bad_(bad) {}
  std::int64_t size() const override { return inner_.size(); }
  SampleShape shape() const override { return inner_.shape(); }
  int num_classes() const override { return inner_.num_classes(); }
  int get(std::int64_t index, float* out) const override {
    ++reads;
    DIT_CHECK(index != bad_, "data.h5: sample ", index, " cannot be read");
    return inner_.get(index, out);
  }
  std::string describe() const override { return "failing"; }
  mutable std::atomic<int> reads{0};

 private:
  SyntheticDataset inner_;
  std::int64_t bad_;
};

struct Fixture {
  SyntheticDataset data{SampleShape{1, 8, 8}, 4, 64, 7};
  diffusion::Schedule schedule = diffusion::create_diffusion({"", true, 1000});
  BatchSource source{data, schedule, BatchPlan::make(8, 2, 2), 11, 0.1, 4};
};

}  // namespace

TEST(ReadAhead, ServesWhatTheSourceComputesInOrderAndAfterAJump) {
  Fixture f;
  for (int depth : {1, 2, 5}) {
    ReadAhead ra(f.source, 1, depth);
    for (std::int64_t step = 0; step < 6; ++step)
      for (int mb = 0; mb < 2; ++mb)
        ASSERT_TRUE(same(ra.take(step, mb), f.source.get(step, 1, mb))) << "depth " << depth << " step " << step;
    // A resumed run starts elsewhere; a skipped microbatch restarts the read-ahead too.
    ASSERT_TRUE(same(ra.take(40, 0), f.source.get(40, 1, 0)));
    ASSERT_TRUE(same(ra.take(40, 1), f.source.get(40, 1, 1)));
    ASSERT_TRUE(same(ra.take(42, 1), f.source.get(42, 1, 1)));
    ASSERT_TRUE(same(ra.take(43, 0), f.source.get(43, 1, 0)));
    ASSERT_TRUE(same(ra.take(3, 0), f.source.get(3, 1, 0)));
  }
}

TEST(ReadAhead, AFailedReadFailsTheStepThatNeedsIt) {
  Fixture f;
  // The dataset index of stream position 20 (step 1, dp rank 0, microbatch 1 with 2 ranks x 2
  // microbatches x 2 samples per step... position = step * 8 + (dp * 2 + mb) * 2).
  const std::int64_t bad = f.source.dataset_index(1 * 8 + (0 * 2 + 1) * 2);
  FailingDataset data(bad);
  BatchSource source(data, f.schedule, BatchPlan::make(8, 2, 2), 11, 0.1, 4);
  ReadAhead ra(source, 0, 2);
  EXPECT_NO_THROW(ra.take(0, 0));
  EXPECT_NO_THROW(ra.take(0, 1));
  EXPECT_NO_THROW(ra.take(1, 0));
  try {
    ra.take(1, 1);
    FAIL() << "the batch with the unreadable sample was served";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sample " + std::to_string(bad) + " cannot be read"), std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(ra.take(2, 0));  // the next step reads on
}

TEST(ReadAhead, ReadsAheadAndStopsWithReadsQueued) {
  Fixture f;
  FailingDataset data(-1);
  BatchSource source(data, f.schedule, BatchPlan::make(8, 2, 2), 11, 0.1, 4);
  {
    ReadAhead ra(source, 0, 3);
    ra.take(0, 0);  // starts the thread: it reads the next 3 microbatches (2 samples each)
    for (int i = 0; i < 200 && data.reads.load() < 2 + 3 * 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    EXPECT_EQ(data.reads.load(), 2 + 3 * 2) << "the thread should fill its queue and wait";
  }  // destroyed with three batches queued: no hang, no crash
}

}  // namespace dit
