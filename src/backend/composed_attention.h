// Multi-head attention composed of backend primitives, written once for every backend: strided
// batched GEMMs for S = scale Q K^T, O = P V, dV = P^T dO, dP = dO V^T, dQ = scale dS K and
// dK = scale dS^T Q; softmax_rows (which saves the row logsumexp, and recomputes P from it in
// backward); softmax_rows_bwd for dS = P (dP - rowsum(dO o O)); row_dot and transpose_01 to move
// between the fused qkv layout and per-head blocks. On the GPU the GEMMs run on tensor cores.
//
// Layouts: qkv (N, T, 3*H*E), out (N, T, H*E), lse (N, H, T) fp32, as backend.h states them. A
// tile of nt samples is transposed into per-head blocks (3H, nt*T, E), so that Q, K and V of
// (head h, sample n) are batch h*nt + n of three (H*nt, T, E) tensors. Scores for a group of heads
// of the tile live in the workspace: fp32 S (B, T, T) and, below fp32, P (B, T, T) in the compute
// dtype, B = heads x samples of the group. The tile is chosen so that all of it fits the
// workspace budget (whole samples first; heads of one sample when one sample does not fit).
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/backend.h"

namespace dit {

// How the composed attention cuts a problem: `samples` per tile, `heads` per group of a tile.
struct AttentionTiling {
  std::int64_t samples, heads;
};

enum class AttnDirection : std::uint8_t { Forward, Backward };

// One problem: qkv (n, t, 3*h*e) of `dtype`.
struct AttentionDims {
  std::int64_t n, t, h, e;
  DType dtype;
};

// The workspace bytes of one tile (all of it: per-head blocks, statistics and scores).
std::size_t composed_tile_bytes(const AttentionDims& d, AttnDirection dir, AttentionTiling tile);
// The largest tile within `budget` bytes (at least one head of one sample).
AttentionTiling composed_tiling(const AttentionDims& d, AttnDirection dir, std::size_t budget);

// The composed attention's state on one backend: its workspace, one allocation grown to the
// largest need seen and then kept, so after the first step nothing is allocated.
class ComposedAttention {
 public:
  static constexpr std::size_t kDefaultBudget = std::size_t{256} << 20;
  // `alloc` is the backend whose primitives will run (workspace memory comes from it).
  explicit ComposedAttention(Allocator& alloc, std::size_t budget = kDefaultBudget);
  ~ComposedAttention();
  ComposedAttention(const ComposedAttention&) = delete;
  ComposedAttention& operator=(const ComposedAttention&) = delete;

  // The primitives' contract of Backend::attention_fwd / attention_bwd, on `be`.
  void forward(Backend& be, const Tensor& qkv, int heads, const Tensor& out, const Tensor& lse);
  void backward(Backend& be, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                const Tensor& dout, int heads, const Tensor& dqkv);

  std::size_t workspace_bytes() const { return bytes_; }  // held now, the most so far
  std::size_t budget() const { return budget_; }

 private:
  void* reserve(std::size_t bytes);

  Allocator& alloc_;
  std::size_t budget_;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace dit
