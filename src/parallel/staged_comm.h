// A Comm for tensors the wrapped communicator cannot take directly (device memory, bf16/fp16):
// each collective or message copies them to host fp32 (int32 stays int32) through the backend,
// runs the wrapped (MPI) communicator on the copy, and copies the result back in the tensor's
// dtype. Sums are therefore taken in fp32 whatever the storage dtype. Host fp32/int32 tensors and
// the host-double calls go straight through.
//
// This is how a multi-rank layout runs where NCCL cannot: several ranks sharing one GPU, or the
// CPU backend with bf16/fp16 storage. It is correct, not fast: every call crosses the host.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "parallel/comm.h"

namespace dit {

class StagedComm final : public Comm {
 public:
  StagedComm(std::unique_ptr<Comm> inner, Backend& be);

  int size() const override { return inner_->size(); }
  int rank() const override { return inner_->rank(); }
  Comm& inner() { return *inner_; }

  void all_reduce_sum(const Tensor& x) override;
  void all_gather(const Tensor& in, const Tensor& out) override;
  void reduce_scatter_sum(const Tensor& in, const Tensor& out) override;
  void broadcast(const Tensor& x, int root) override;
  void barrier() override;
  double all_reduce_max(double v) override;
  void all_reduce_sum(double* v, int n) override;
  Request isend(const Tensor& x, int peer, int tag) override;
  Request irecv(const Tensor& x, int peer, int tag) override;
  void wait(Request& r) override;
  void progress() override { inner_->progress(); }

 private:
  // A host copy of a tensor in the dtype the wrapped comm takes (fp32, or int32).
  struct Staged {
    std::vector<std::uint32_t> words;  // 4-byte elements: fp32 or int32
    Tensor host;
  };
  bool direct(const Tensor& t) const;
  Staged stage(const Tensor& t, bool copy_in);
  void unstage(const Staged& s, const Tensor& t);
  // Adds what the wrapped comm counted during one call to this comm's stats. byte_ratio converts
  // the staged fp32 bytes back to the tensor's own (0.5 for bf16/fp16), so the accounting shows
  // the payload as NCCL would move it.
  template <typename F>
  auto counted(F&& f, double byte_ratio = 1.0);
  static double ratio(const Tensor& t) { return static_cast<double>(dtype_size(t.dtype)) / 4.0; }

  std::unique_ptr<Comm> inner_;
  Backend* be_;
  struct Pending {
    Staged buffer;
    Tensor target;  // receives: where the message lands on wait(); sends: empty
  };
  std::map<std::int64_t, Pending> pending_;
};

}  // namespace dit
