// The read-ahead thread of the training batches (see read_ahead.h).
#include "engine/read_ahead.h"

#include "core/error.h"

namespace dit {

ReadAhead::ReadAhead(const BatchSource& source, int dp_rank, int depth)
    : source_(source), dp_rank_(dp_rank), depth_(static_cast<std::size_t>(depth)) {
  DIT_CHECK(depth >= 1, "read-ahead depth ", depth, ": expected at least 1");
}

ReadAhead::~ReadAhead() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

ReadAhead::Key ReadAhead::after(Key k) const {
  return k.mb + 1 < source_.plan().microbatches ? Key{k.step, k.mb + 1} : Key{k.step + 1, 0};
}

Microbatch ReadAhead::take(std::int64_t step, int mb) {
  const Key want{step, mb};
  std::unique_lock<std::mutex> lock(mu_);
  if (started_) {
    // The wanted batch is queued or being read when it is the next in line.
    const bool in_line = (!ready_.empty() && ready_.front().key == want) || (ready_.empty() && next_ == want);
    if (in_line) {
      cv_.wait(lock, [&] { return !ready_.empty(); });
      Item item = std::move(ready_.front());
      ready_.pop_front();
      cv_.notify_all();
      lock.unlock();
      if (item.error) std::rethrow_exception(item.error);
      return std::move(item.batch);
    }
  }
  // Out of order (or the first request): restart the read-ahead after this batch, read it here.
  ready_.clear();
  next_ = after(want);
  ++generation_;
  if (!started_) {
    started_ = true;
    thread_ = std::thread([this] { run(); });
  }
  cv_.notify_all();
  lock.unlock();
  std::lock_guard<std::mutex> read(read_mu_);
  return source_.get(step, dp_rank_, mb);
}

void ReadAhead::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || ready_.size() < depth_; });
    if (stop_) return;
    const Key key = next_;
    const std::uint64_t generation = generation_;
    lock.unlock();
    Item item{key, {}, nullptr};
    try {
      std::lock_guard<std::mutex> read(read_mu_);
      item.batch = source_.get(key.step, dp_rank_, key.mb);
    } catch (...) {
      item.error = std::current_exception();
    }
    lock.lock();
    if (generation != generation_) continue;  // restarted meanwhile: this read is not in line
    ready_.push_back(std::move(item));
    next_ = after(key);
    cv_.notify_all();
  }
}

}  // namespace dit
