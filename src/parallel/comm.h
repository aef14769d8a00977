// The communication interface every parallel axis talks through (tensor, pipeline, data).
// Implementations: MPI (always) and NCCL (CUDA builds). A Comm of size 1 makes every collective a
// no-op, so layer code calls collectives unconditionally. Each Comm counts the bytes it moves and
// the time spent inside its calls, for the step accounting.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

#include "core/tensor.h"

namespace dit {

// Bytes one rank sends for a collective under the bandwidth-optimal ring algorithms, the measure of
// the step accounting and of `dit_mp plan`: an all-reduce of X bytes over p ranks sends
// 2 (p - 1) / p X, an all-gather or reduce-scatter (p - 1) / p of the full tensor. An all-reduce thus
// costs exactly one reduce-scatter plus one all-gather (the identity sequence parallelism rests on).
inline std::uint64_t ring_all_reduce_bytes(std::size_t bytes, int p) {
  return p <= 1 ? 0 : 2 * static_cast<std::uint64_t>(p - 1) * bytes / static_cast<std::uint64_t>(p);
}
inline std::uint64_t ring_gather_scatter_bytes(std::size_t full_bytes, int p) {
  return p <= 1 ? 0 : static_cast<std::uint64_t>(p - 1) * full_bytes / static_cast<std::uint64_t>(p);
}

struct CommStats {
  std::uint64_t bytes = 0;  // bytes this rank sent through this comm (collectives: ring_*_bytes)
  std::uint64_t calls = 0;
  double seconds = 0;       // wall time inside calls (waiting included)
  void reset() { *this = CommStats{}; }
};

// Counts one call of a communicator into its stats: the payload now, the time spent inside the
// call when it goes out of scope (host time: for NCCL, the time to enqueue the work).
class CallTimer {
 public:
  CallTimer(CommStats& s, std::size_t bytes) : s_(s), t0_(std::chrono::steady_clock::now()) {
    s.bytes += bytes;
    ++s.calls;
  }
  ~CallTimer() {
    s_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }
  CallTimer(const CallTimer&) = delete;
  CallTimer& operator=(const CallTimer&) = delete;

 private:
  CommStats& s_;
  std::chrono::steady_clock::time_point t0_;
};

// A pending non-blocking point-to-point operation.
struct Request {
  std::int64_t id = -1;
  bool pending() const { return id >= 0; }
};

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int size() const = 0;
  virtual int rank() const = 0;

  // x = sum over ranks of x (in place)
  virtual void all_reduce_sum(const Tensor& x) = 0;
  // out (size * in.numel()) = concatenation of every rank's `in`, in rank order. `in` may be this
  // rank's block of `out` (in place).
  virtual void all_gather(const Tensor& in, const Tensor& out) = 0;
  // out (in.numel() / size) = this rank's block of the sum over ranks of `in`
  virtual void reduce_scatter_sum(const Tensor& in, const Tensor& out) = 0;
  virtual void broadcast(const Tensor& x, int root) = 0;
  virtual void barrier() = 0;
  // Largest value over ranks (for agreeing on errors and step counts).
  virtual double all_reduce_max(double v) = 0;
  // Sums host doubles over ranks in place (statistics, norms, error sums).
  virtual void all_reduce_sum(double* v, int n) = 0;

  // Non-blocking point-to-point; the tensor must stay alive until wait() returns.
  virtual Request isend(const Tensor& x, int peer, int tag) = 0;
  virtual Request irecv(const Tensor& x, int peer, int tag) = 0;
  virtual void wait(Request& r) = 0;
  // Lets the transport advance pending non-blocking operations (MPI's progress from the training
  // thread between primitives); completes nothing the caller must wait for.
  virtual void progress() {}
  // Whether isend/irecv of the backend's tensors reach every rank of the communicator (NCCL's
  // connect pipeline neighbours only: optim/zero.h then keeps to collectives).
  virtual bool sends_to_any_rank() const { return true; }

  CommStats& stats() { return stats_; }

 protected:
  CommStats stats_;
};

// The trivial communicator of one rank: every collective leaves its data as it is.
class SelfComm final : public Comm {
 public:
  int size() const override { return 1; }
  int rank() const override { return 0; }
  void all_reduce_sum(const Tensor&) override {}
  void all_gather(const Tensor& in, const Tensor& out) override;
  void reduce_scatter_sum(const Tensor& in, const Tensor& out) override;
  void broadcast(const Tensor&, int) override {}
  void barrier() override {}
  double all_reduce_max(double v) override { return v; }
  void all_reduce_sum(double*, int) override {}
  Request isend(const Tensor&, int peer, int) override;
  Request irecv(const Tensor&, int peer, int) override;
  void wait(Request& r) override { r.id = -1; }
};

}  // namespace dit
