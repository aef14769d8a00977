// The backend this rank computes on and the threads it may use: CPU threads fitted to the cores
// mpirun gave the rank, and the backend named by train.backend x train.precision, placed on a GPU
// of the node when it is CUDA.
#pragma once

#include <memory>
#include <string>

#include "backend/backend.h"

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

}  // namespace dit
