// Fits a ParallelContext's communicators to the backend whose tensors they will carry. MPI takes
// host fp32/int32 tensors only; anything else (GPU memory, bf16/fp16 storage) goes through NCCL
// where each rank has a GPU of its own, or through host staging (StagedComm) otherwise.
#pragma once

#include <string>

#include "backend/backend.h"
#include "parallel/grid.h"

namespace dit {

// Call once on every rank after make_mpi_context and the backend's creation (collective: NCCL
// communicators are built over MPI). Returns one line saying what the tensor communicators are:
// "mpi", "mpi, host-staged (<why>)" or "nccl". DIT_COMM=mpi forces host staging on GPUs.
std::string attach_backend_comms(ParallelContext& ctx, Backend& be);

}  // namespace dit
