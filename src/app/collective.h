// Helpers for commands that run on every rank: agreeing on setup failures (one message, every
// rank exits non-zero, no hang) and deriving the data-parallel size from the world size.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "parallel/grid.h"

namespace dit {

// Thrown on every rank after an agreed failure that has already been reported.
struct AgreedFailure {};

int world_rank();
int world_size();
// "dit_mp: rank r: error: ..." as one line on stderr; r is this rank unless `rank` names another.
void print_error(const char* what, int rank = -1);

// Runs `check` on every rank; it must not communicate. If it throws on any rank, the lowest
// failing rank prints its message and every rank throws AgreedFailure. Without MPI (a plain
// process, e.g. a unit test) it just runs `check`, whose exception propagates.
void collective_check(const std::function<void()>& check);

// Caps this rank's OpenMP threads at the cores it may run on (mpirun binds ranks to cores by
// default; two threads on one core are several times slower than one). Rank 0 prints a note when
// it had to.
void fit_threads_to_cores();

// tp x pp x dp with dp = world / (tp * pp), or a message naming the numbers and what would fit.
Layout layout_for_world(int tp, int pp);

// The backend this rank computes on: `backend` "cpu" or "cuda", `precision` "fp32", "bf16" or
// "fp16" (the storage dtype of params, activations and grads). The CUDA backend first places the
// rank on a GPU of its node (node-local rank modulo the GPUs there). Collective: every rank calls
// it with the same arguments; a failure is agreed (AgreedFailure). Afterwards attach_backend_comms
// (parallel/backend_comms.h) fits the communicators to it.
std::unique_ptr<Backend> make_rank_backend(const std::string& backend, const std::string& precision);
// "cuda" + "bf16" -> "cuda:bf16". A backend already naming a dtype ("cuda:bf16") keeps it; it must
// agree with `precision` unless that is the default fp32.
std::string backend_name(const std::string& backend, const std::string& precision);

}  // namespace dit
