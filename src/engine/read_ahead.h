// Training batches read ahead on a background thread: while the step computes, the thread reads
// the next microbatches (BatchSource::get: the dataset's HDF5 reads, the timestep and label draws)
// into a bounded queue, so a step does not wait on its reads. The batches are BatchSource's pure
// function of (seed, step, dp rank, microbatch) whoever computes them: read ahead or not, they are
// the same bits.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

#include "engine/batch.h"

namespace dit {

class ReadAhead {
 public:
  // Keeps up to `depth` microbatches of dp rank `dp_rank` ready (depth >= 1).
  ReadAhead(const BatchSource& source, int dp_rank, int depth);
  ~ReadAhead();  // stops the thread (after the read in progress)
  ReadAhead(const ReadAhead&) = delete;
  ReadAhead& operator=(const ReadAhead&) = delete;

  // Microbatch `mb` of `step`. Requests are expected in training order (microbatches 0..M-1 of a
  // step, then the next step); the thread reads ahead from the last request, and a request out of
  // that order (a resumed run's first step) is read at once and restarts the read-ahead after it.
  // A read that failed on the thread throws here, when its batch is asked for.
  Microbatch take(std::int64_t step, int mb);

 private:
  struct Key {
    std::int64_t step = 0;
    int mb = 0;
    bool operator==(const Key& o) const { return step == o.step && mb == o.mb; }
  };
  struct Item {
    Key key;
    Microbatch batch;
    std::exception_ptr error;
  };
  Key after(Key k) const;
  void run();

  const BatchSource& source_;
  int dp_rank_;
  std::size_t depth_;
  std::mutex read_mu_;  // BatchSource::get reads the dataset through shared HDF5 selections
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> ready_;
  Key next_;             // the key the thread reads next
  bool started_ = false;  // the thread runs once the first batch is asked for
  bool stop_ = false;
  std::uint64_t generation_ = 0;  // bumped when a request restarts the read-ahead
  std::thread thread_;
};

}  // namespace dit
