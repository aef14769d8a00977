// The backend this rank computes on and the threads it may use: CPU threads fitted to the cores
// mpirun gave the rank, and the backend named by train.backend x train.precision, placed on a GPU
// of the node when it is CUDA; and make_rank, the one way every subcommand sets up a rank: its
// backend, its place in the rank grid and the communicators fitted to the backend.
#pragma once

#include <csignal>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "parallel/grid.h"
#include "parallel/watchdog.h"

namespace dit {

// Caps this rank's OpenMP threads at the cores it may run on (mpirun binds ranks to cores by
// default; two threads on one core are several times slower than one). Rank 0 prints a note when
// it had to.
void fit_threads_to_cores();

// The backend this rank computes on: `backend` "cpu" or "cuda", `precision` "fp32", "bf16" or
// "fp16" (the storage dtype of params, activations and grads). The CUDA backend first places the
// rank on a GPU of its node (node-local rank modulo the GPUs there). Collective: every rank calls
// it with the same arguments; a failure is agreed. Afterwards attach_backend_comms
// (parallel/backend_comms.h) fits the communicators to it.
std::unique_ptr<Backend> make_rank_backend(const std::string& backend, const std::string& precision);
// "cuda" + "bf16" -> "cuda:bf16". A backend already naming a dtype ("cuda:bf16") keeps it; it must
// agree with `precision` unless that is the default fp32.
std::string backend_name(const std::string& backend, const std::string& precision);

// Whether the tensor communicators are fitted to the backend (attach_backend_comms). Leave: a
// rank that moves no tensor (train --dry-run, the layout search), so no NCCL communicator is built.
enum class TensorComms { Attach, Leave };

struct RankRequest {
  std::string backend = "cpu";      // "cpu" or "cuda" (or "cuda:bf16"); "" makes no backend
  std::string precision = "fp32";   // fp32, bf16 or fp16
  Layout layout;                    // the rank grid the world splits into (tp x pp x dp = world size)
  double timeout_s = CommWatch::kDefaultTimeout;  // the watchdog's (parallel.timeout_s; 0: off)
  std::string timeout_setting{};    // where timeout_s was set, named in a timeout's message ("": none)
  const volatile std::sig_atomic_t* stop_signal = nullptr;  // a run's stop flag (run/signals.h), or none
  TensorComms comms = TensorComms::Attach;
};

// What a rank computes on and talks over.
struct RankSetup {
  std::unique_ptr<Backend> backend;  // null when the request named none
  ParallelContext ctx;
  std::string comms;   // attach_backend_comms' line ("mpi", "nccl", ...); "" when left
  std::string device;  // "cuda:N" where the rank computes on a GPU, else ""
};

// Collective: the backend (make_rank_backend), the rank grid over MPI_COMM_WORLD
// (make_mpi_context; a process without MPI is one rank on its own) with the watchdog's settings,
// then the tensor communicators fitted to the backend. Every rank calls it with the same request;
// a failure is agreed.
RankSetup make_rank(const RankRequest& r);

}  // namespace dit
