// Comm over MPI. Host memory only (the CUDA backend stages through the host or uses NCCL).
#pragma once

#include <mpi.h>

#include <memory>
#include <unordered_map>

#include "parallel/comm.h"

namespace dit {

// MPI is initialized and not yet finalized (false in a plain process, e.g. a unit test).
bool mpi_running();

class MpiComm final : public Comm {
 public:
  // Wraps MPI_COMM_WORLD (not freed) or owns a communicator made by split().
  static std::unique_ptr<MpiComm> world();
  static std::unique_ptr<MpiComm> split(const Comm& parent, int color, int key);
  ~MpiComm() override;

  int size() const override { return size_; }
  int rank() const override { return rank_; }
  MPI_Comm handle() const { return comm_; }

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

 private:
  MpiComm(MPI_Comm comm, bool owned);
  // Completes a request: MPI_Wait, or (DIT_MPI_WAIT=yield) MPI_Test polling that yields the core
  // to other ranks while waiting.
  void complete(MPI_Request& r);
  MPI_Comm comm_;
  bool owned_;
  int size_ = 1, rank_ = 0;
  bool yield_ = false;
  std::int64_t next_request_ = 0;
  std::unordered_map<std::int64_t, MPI_Request> requests_;
};

}  // namespace dit
