// Comm over MPI. Host memory only (the CUDA backend stages through the host or uses NCCL).
// Every wait polls against the watchdog's deadline (parallel/watchdog.h), so no call blocks for
// longer than the watchdog's timeout.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "parallel/comm.h"
#include "parallel/watchdog.h"

namespace dit {

// MPI is initialized and not yet finalized (false in a plain process, e.g. a unit test).
bool mpi_running();

class MpiComm final : public Comm {
 public:
  // Wraps MPI_COMM_WORLD (not freed) or owns a communicator made by split(). `watch` (shared by
  // every communicator split from this one) holds the timeout and where the run is; a fresh
  // one with the default timeout when null. `name` ("tp", "pp", "dp") names the group in messages.
  static std::unique_ptr<MpiComm> world(std::shared_ptr<CommWatch> watch = nullptr);
  static std::unique_ptr<MpiComm> split(const Comm& parent, int color, int key, const std::string& name = "");
  ~MpiComm() override;

  int size() const override { return size_; }
  int rank() const override { return rank_; }
  MPI_Comm handle() const { return comm_; }
  const std::shared_ptr<CommWatch>& watch() const { return watch_; }

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
  void progress() override;  // MPI_Test on each pending request

 private:
  MpiComm(MPI_Comm comm, bool owned, std::shared_ptr<CommWatch> watch, std::string name);
  // What a wait is for, for the timeout message: a collective of the whole group (peer -1) or
  // a message from/to one peer (a rank of this communicator).
  struct Wait {
    const char* op;
    int peer = -1;
    int tag = -1;
  };
  struct Pending {
    MPI_Request request;
    Wait what;
  };
  // Completes a request by MPI_Test polling against the watchdog's deadline (yielding the core
  // between polls with DIT_MPI_WAIT=yield); throws naming the operation and peer when it runs
  // out. With the watchdog off and no yielding, plain MPI_Wait.
  void complete(MPI_Request& r, const Wait& what);
  // On a timeout, asks the ranks waited on what they wait for (the chain to the rank that
  // stopped; see mpi_comm.cpp) and throws naming them.
  [[noreturn]] void timed_out(const Wait& what, double waited) const;
  std::vector<int> waited_on(const Wait& w) const;  // world ranks: the peer, or the group but this rank
  std::string describe(const Wait& w) const;        // "the all-reduce over the tp group (world ranks 0, 1)"
  // The wait in progress, as other ranks' timeout inquiries see it.
  struct WaitingOn {
    const MpiComm* comm;
    const Wait* what;
    static std::string answer(const void* self);
  };
  std::string group() const;  // "the tp group (world ranks 0, 1)"
  MPI_Comm comm_;
  bool owned_;
  int size_ = 1, rank_ = 0;
  bool yield_ = false;
  std::shared_ptr<CommWatch> watch_;
  std::string name_;
  std::vector<int> world_ranks_;  // world rank of each rank of this communicator
  std::int64_t next_request_ = 0;
  std::unordered_map<std::int64_t, Pending> requests_;
};

}  // namespace dit
