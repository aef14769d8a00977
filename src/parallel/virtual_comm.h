// A communicator of `size` ranks that moves nothing and counts what it would move: the planner's
// stand-in for one rank of a layout (`dit_mp plan` runs one rank per pipeline stage in one
// process). Byte counts follow the same ring rules as the real communicators (comm.h).
#pragma once

#include "parallel/comm.h"

namespace dit {

class VirtualComm final : public Comm {
 public:
  // `sends_to_any_rank`: false plans a transport whose sends reach pipeline neighbours only (NCCL's).
  VirtualComm(int size, int rank, bool sends_to_any_rank = true)
      : size_(size), rank_(rank), sends_(sends_to_any_rank) {}
  int size() const override { return size_; }
  bool sends_to_any_rank() const override { return sends_; }
  int rank() const override { return rank_; }
  void all_reduce_sum(const Tensor& x) override {
    if (size_ > 1) CallTimer t(stats_, ring_all_reduce_bytes(x.bytes(), size_));
  }
  void all_gather(const Tensor&, const Tensor& out) override {
    CallTimer t(stats_, ring_gather_scatter_bytes(out.bytes(), size_));
  }
  void reduce_scatter_sum(const Tensor& in, const Tensor&) override {
    CallTimer t(stats_, ring_gather_scatter_bytes(in.bytes(), size_));
  }
  void broadcast(const Tensor& x, int root) override {
    CallTimer t(stats_, rank_ == root ? x.bytes() : 0);
  }
  void barrier() override {}
  double all_reduce_max(double v) override { return v; }
  void all_reduce_sum(double*, int) override {}
  Request isend(const Tensor& x, int, int) override {
    CallTimer t(stats_, x.bytes());
    return {};
  }
  Request irecv(const Tensor&, int, int) override { return {}; }
  void wait(Request& r) override { r.id = -1; }

 private:
  int size_, rank_;
  bool sends_;
};

}  // namespace dit
