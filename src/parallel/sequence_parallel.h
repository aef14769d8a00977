// Megatron sequence parallelism's tensor-parallel mappings along tokens. Outside the tp GEMMs
// (LayerNorm + modulate, gate-residual) each tp rank keeps T/tp tokens of every sample: rank r owns
// tokens [r T/tp, (r+1) T/tp). Before a column-parallel GEMM the tokens are all-gathered; after a
// row-parallel GEMM the partial sums are reduce-scattered instead of all-reduced. The two are
// conjugate (the backward of one is the other), and together they move exactly the bytes of the
// all-reduce they replace (comm.h, ring bytes).
#pragma once

#include "backend/backend.h"
#include "parallel/comm.h"

namespace dit {

// full (N, T, D) = every rank's local (N, T/tp, D), tokens in rank order. Temporaries in scratch.
void gather_tokens(Comm& tp, Backend& be, const Tensor& local, const Tensor& full, Arena& scratch);
// local (N, T/tp, D) = this rank's tokens of the sum over ranks of full (N, T, D).
void reduce_scatter_tokens(Comm& tp, Backend& be, const Tensor& full, const Tensor& local,
                           Arena& scratch);
// local (N, T/tp, D) = this rank's tokens of full (N, T, D), which every rank holds (no message).
void split_tokens(Comm& tp, Backend& be, const Tensor& full, const Tensor& local, Arena& scratch);

}  // namespace dit
