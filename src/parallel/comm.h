// The communication interface every parallel axis talks through (tensor, pipeline, data).
// Implementations: MPI (always) and NCCL (CUDA builds). A Comm of size 1 makes every collective a
// no-op, so layer code calls collectives unconditionally.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace dit {

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int size() const = 0;
  virtual int rank() const = 0;

  // x = sum over ranks of x (in place)
  virtual void all_reduce_sum(const Tensor& x) = 0;
  // out (size * in.numel()) = concatenation of every rank's `in`, in rank order
  virtual void all_gather(const Tensor& in, const Tensor& out) = 0;
  // out (in.numel() / size) = this rank's block of the sum over ranks of `in`
  virtual void reduce_scatter_sum(const Tensor& in, const Tensor& out) = 0;
  virtual void broadcast(const Tensor& x, int root) = 0;
  virtual void barrier() = 0;
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
};

}  // namespace dit
