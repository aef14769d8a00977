// Token all-gather / reduce-scatter over tp (see sequence_parallel.h). A collective moves one
// contiguous block per rank, so (N, tp, T/tp * D) is transposed to (tp, N, T/tp * D) around it;
// with N = 1 the two layouts coincide and the collective works in place.
#include "parallel/sequence_parallel.h"

namespace dit {

namespace {
struct TokenViews {
  Shape by_sample;  // (N, tp, T/tp * D): the full tensor
  Shape by_rank;    // (tp, N, T/tp * D): what the collective sees
};

TokenViews views(const Comm& tp, const Tensor& full, const Tensor& local) {
  const std::int64_t n = full.dim(0), p = tp.size();
  DIT_CHECK(full.shape.rank == 3 && local.shape.rank == 3 && local.dim(0) == n &&
                full.dim(1) == local.dim(1) * p && full.dim(2) == local.dim(2),
            "sequence parallelism: ", local.shape.str(), " is not a 1/", p, " token share of ",
            full.shape.str());
  const std::int64_t block = local.numel() / n;
  return {{n, p, block}, {p, n, block}};
}
}  // namespace

void gather_tokens(Comm& tp, Backend& be, const Tensor& local, const Tensor& full, Arena& scratch) {
  const TokenViews v = views(tp, full, local);
  if (full.dim(0) == 1) return tp.all_gather(local, full);
  const Tensor by_rank = scratch.tensor(v.by_rank, full.dtype);
  tp.all_gather(local, by_rank);
  be.transpose_01(by_rank, full.view(v.by_sample));
}

void reduce_scatter_tokens(Comm& tp, Backend& be, const Tensor& full, const Tensor& local,
                           Arena& scratch) {
  const TokenViews v = views(tp, full, local);
  if (full.dim(0) == 1) return tp.reduce_scatter_sum(full, local);
  const Tensor by_rank = scratch.tensor(v.by_rank, full.dtype);
  be.transpose_01(full.view(v.by_sample), by_rank);
  tp.reduce_scatter_sum(by_rank, local);
}

void split_tokens(Comm& tp, Backend& be, const Tensor& full, const Tensor& local, Arena& scratch) {
  const TokenViews v = views(tp, full, local);
  const Tensor by_rank = scratch.tensor(v.by_rank, full.dtype);
  be.transpose_01(full.view(v.by_sample), by_rank);
  be.copy(local, by_rank.rows(tp.rank(), 1).view(local.shape));
}

}  // namespace dit
