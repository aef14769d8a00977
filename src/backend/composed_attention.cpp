// The composed attention (see composed_attention.h): tiling, workspace, and the forward and
// backward as sequences of backend primitives.
#include "backend/composed_attention.h"

#include <algorithm>
#include <cmath>

namespace dit {

namespace {

using i64 = std::int64_t;

constexpr std::size_t kAlign = 256;  // every part of the workspace starts on this boundary

std::size_t aligned(std::size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }
std::size_t elems(i64 count, DType t) {
  return aligned(static_cast<std::size_t>(count) * dtype_size(t));
}

// The dtype of the second score buffer: P (forward and backward) below fp32; in fp32 P is S
// itself, and the backward's second buffer holds dP and then dS.
bool separate_probs(DType t) { return t != DType::F32; }

// Hands out consecutive aligned views of the workspace.
class Carver {
 public:
  Carver(void* base, Device device) : at_(static_cast<char*>(base)), device_(device) {}
  Tensor take(Shape s, DType t) {
    Tensor x{at_, t, s, device_};
    at_ += elems(s.numel(), t);
    return x;
  }

 private:
  char* at_;
  Device device_;
};

AttentionDims dims_of(const Tensor& qkv, int heads, const Tensor& out, const Tensor& lse) {
  DIT_CHECK(qkv.shape.rank == 3 && heads > 0 && qkv.dim(2) % (3 * heads) == 0,
            "attention: qkv ", qkv.shape.str(), " is not (N, T, 3 * ", heads, " * E)");
  const AttentionDims d{qkv.dim(0), qkv.dim(1), heads, qkv.dim(2) / (3 * heads), qkv.dtype};
  DIT_CHECK(out.numel() == d.n * d.t * d.h * d.e && lse.numel() == d.n * d.h * d.t,
            "attention: out ", out.shape.str(), " or lse ", lse.shape.str(), " does not match qkv ",
            qkv.shape.str());
  DIT_CHECK(out.dtype == qkv.dtype && lse.dtype == DType::F32, "attention: out in ",
            dtype_name(out.dtype), " and lse in ", dtype_name(lse.dtype), " for qkv in ",
            dtype_name(qkv.dtype), " (out takes qkv's dtype, lse fp32)");
  return d;
}

// The parts of one tile, in the order they are carved.
struct TileParts {
  Tensor qkvh;       // (3*H*nt, T, E): q, k, v per (head, sample)
  Tensor oh;         // forward: (H*nt, T, E) the output per (head, sample)
  Tensor dqkvh;      // backward: (3*H*nt, T, E)
  Tensor doh;        // backward: (H*nt, T, E)
  Tensor delta_tok;  // backward: (nt*T*H) rowsum(dO o O) in token order
  Tensor delta;      // backward: (H*nt, T) the same per (head, sample)
  Tensor lse;        // (H*nt, T)
  Tensor s;          // (heads*nt, T, T) fp32: S, then (backward, below fp32) dP
  Tensor p;          // (heads*nt, T, T): P below fp32; in fp32 backward, dP then dS
};

TileParts carve(Carver& c, const AttentionDims& d, AttnDirection dir, AttentionTiling tile) {
  const i64 nt = tile.samples, hn = d.h * nt, groups = tile.heads * nt;
  const bool bwd = dir == AttnDirection::Backward;
  TileParts t;
  t.qkvh = c.take({3 * hn, d.t, d.e}, d.dtype);
  if (bwd) {
    t.dqkvh = c.take({3 * hn, d.t, d.e}, d.dtype);
    t.doh = c.take({hn, d.t, d.e}, d.dtype);
    t.delta_tok = c.take({nt * d.t * d.h}, DType::F32);
    t.delta = c.take({hn, d.t}, DType::F32);
  } else {
    t.oh = c.take({hn, d.t, d.e}, d.dtype);
  }
  t.lse = c.take({hn, d.t}, DType::F32);
  t.s = c.take({groups, d.t, d.t}, DType::F32);
  if (separate_probs(d.dtype)) t.p = c.take({groups, d.t, d.t}, d.dtype);
  else if (bwd) t.p = c.take({groups, d.t, d.t}, DType::F32);
  return t;
}

// Views of the per-head blocks of heads [h0, h0 + hb) of a tile of nt samples: batch
// (which * H + h) * nt + n of a (3*H*nt, T, E) tensor.
Tensor heads_of(const Tensor& blocks, const AttentionDims& d, i64 nt, int which, i64 h0, i64 hb) {
  return blocks.rows((which * d.h + h0) * nt, hb * nt);
}

}  // namespace

std::size_t composed_tile_bytes(const AttentionDims& d, AttnDirection dir, AttentionTiling tile) {
  const i64 nt = tile.samples, hn = d.h * nt, x = hn * d.t * d.e;
  const i64 scores = tile.heads * nt * d.t * d.t;
  std::size_t b = elems(3 * x, d.dtype) + elems(hn * d.t, DType::F32);  // qkvh, lse
  if (dir == AttnDirection::Backward) {
    b += elems(3 * x, d.dtype) + elems(x, d.dtype) + 2 * elems(hn * d.t, DType::F32);
  } else {
    b += elems(x, d.dtype);
  }
  b += elems(scores, DType::F32);
  if (separate_probs(d.dtype)) b += elems(scores, d.dtype);
  else if (dir == AttnDirection::Backward) b += elems(scores, DType::F32);
  return b;
}

AttentionTiling composed_tiling(const AttentionDims& d, AttnDirection dir, std::size_t budget) {
  // The largest count in [1, hi] for which fits(count) holds (bytes grow with the count).
  auto largest = [](i64 hi, auto&& fits) {
    i64 lo = 1;
    while (lo < hi) {
      const i64 mid = lo + (hi - lo + 1) / 2;
      if (fits(mid)) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  };
  auto bytes = [&](i64 samples, i64 heads) { return composed_tile_bytes(d, dir, {samples, heads}); };
  const i64 n = std::max<i64>(d.n, 1);
  if (bytes(1, d.h) <= budget) {
    const i64 nt = largest(n, [&](i64 s) { return bytes(s, d.h) <= budget; });
    const i64 tiles = (n + nt - 1) / nt;
    return {(n + tiles - 1) / tiles, d.h};  // equal tiles: fewer distinct GEMM shapes
  }
  const i64 hg = largest(d.h, [&](i64 h) { return bytes(1, h) <= budget; });
  const i64 groups = (d.h + hg - 1) / hg;
  return {1, (d.h + groups - 1) / groups};
}

ComposedAttention::ComposedAttention(Allocator& alloc, std::size_t budget)
    : alloc_(alloc), budget_(budget) {}

ComposedAttention::~ComposedAttention() {
  if (data_) alloc_.deallocate(data_);
}

void* ComposedAttention::reserve(std::size_t bytes) {
  if (bytes > bytes_) {
    // Freed and allocated again only while a new, larger problem is first seen (the first step);
    // on the GPU both are stream-ordered, so nothing waits.
    if (data_) alloc_.deallocate(data_);
    data_ = nullptr;
    bytes_ = 0;
    data_ = alloc_.allocate(bytes);
    bytes_ = bytes;
  }
  return data_;
}

void ComposedAttention::forward(Backend& be, const Tensor& qkv, int heads, const Tensor& out,
                                const Tensor& lse) {
  const AttentionDims d = dims_of(qkv, heads, out, lse);
  if (d.n == 0 || d.t == 0) return;
  const AttentionTiling tile = composed_tiling(d, AttnDirection::Forward, budget_);
  void* base = reserve(composed_tile_bytes(d, AttnDirection::Forward, tile));
  const float scale = 1.f / std::sqrt(static_cast<float>(d.e));
  const Tensor qkv_n = qkv.view({d.n, d.t * 3 * d.h * d.e});
  const Tensor out_n = out.view({d.n, d.t * d.h * d.e}), lse_n = lse.view({d.n, d.h * d.t});
  for (i64 n0 = 0; n0 < d.n; n0 += tile.samples) {
    const i64 nt = std::min(tile.samples, d.n - n0), rows = nt * d.t;
    Carver c(base, alloc_.device());
    const TileParts t = carve(c, d, AttnDirection::Forward, {nt, tile.heads});
    // (nt*T, 3H, E) -> (3H, nt*T, E): q, k, v of (head, sample) become contiguous (T, E) blocks
    const Tensor& qkvh = t.qkvh;
    be.transpose_01(qkv_n.rows(n0, nt).view({rows, 3 * d.h, d.e}), qkvh.view({3 * d.h, rows, d.e}));
    for (i64 h0 = 0; h0 < d.h; h0 += tile.heads) {
      const i64 hb = std::min(tile.heads, d.h - h0), b = hb * nt;
      const Tensor q = heads_of(qkvh, d, nt, 0, h0, hb), k = heads_of(qkvh, d, nt, 1, h0, hb);
      const Tensor v = heads_of(qkvh, d, nt, 2, h0, hb);
      const Tensor s = t.s.rows(0, b);                            // (B, T, T) fp32
      const Tensor p = t.p.data ? t.p.rows(0, b) : s;              // (B, T, T)
      be.gemm(q, Transpose::No, k, Transpose::Yes, s, Accumulate::Overwrite, scale);  // S = c Q K^T
      be.softmax_rows(s.view({b * d.t, d.t}), p.view({b * d.t, d.t}),
                      t.lse.rows(h0 * nt, b).view({b * d.t}), SoftmaxStats::Compute);
      be.gemm(p, Transpose::No, v, Transpose::No, t.oh.rows(h0 * nt, b), Accumulate::Overwrite);
    }
    be.transpose_01(t.oh.view({d.h, rows, d.e}), out_n.rows(n0, nt).view({rows, d.h, d.e}));
    be.transpose_01(t.lse.view({d.h, nt, d.t}), lse_n.rows(n0, nt).view({nt, d.h, d.t}));
  }
}

void ComposedAttention::backward(Backend& be, const Tensor& qkv, const Tensor& out,
                                 const Tensor& lse, const Tensor& dout, int heads,
                                 const Tensor& dqkv) {
  const AttentionDims d = dims_of(qkv, heads, out, lse);
  DIT_CHECK(dout.numel() == out.numel() && dqkv.numel() == qkv.numel() &&
                dout.dtype == qkv.dtype && dqkv.dtype == qkv.dtype,
            "attention_bwd: dout ", dout.shape.str(), " / dqkv ", dqkv.shape.str(),
            " do not match out / qkv (shapes and dtypes)");
  if (d.n == 0 || d.t == 0) return;
  const AttentionTiling tile = composed_tiling(d, AttnDirection::Backward, budget_);
  void* base = reserve(composed_tile_bytes(d, AttnDirection::Backward, tile));
  const float scale = 1.f / std::sqrt(static_cast<float>(d.e));
  const i64 w = 3 * d.h * d.e, he = d.h * d.e;
  const Tensor qkv_n = qkv.view({d.n, d.t * w}), dqkv_n = dqkv.view({d.n, d.t * w});
  const Tensor out_n = out.view({d.n, d.t * he}), dout_n = dout.view({d.n, d.t * he});
  const Tensor lse_n = lse.view({d.n, d.h * d.t});
  const bool fp32 = !separate_probs(d.dtype);
  for (i64 n0 = 0; n0 < d.n; n0 += tile.samples) {
    const i64 nt = std::min(tile.samples, d.n - n0), rows = nt * d.t;
    Carver c(base, alloc_.device());
    const TileParts t = carve(c, d, AttnDirection::Backward, {nt, tile.heads});
    be.transpose_01(qkv_n.rows(n0, nt).view({rows, 3 * d.h, d.e}), t.qkvh.view({3 * d.h, rows, d.e}));
    be.transpose_01(dout_n.rows(n0, nt).view({rows, d.h, d.e}), t.doh.view({d.h, rows, d.e}));
    // delta = rowsum(dO o O) per (token, head), then per (head, sample, token)
    be.row_dot(dout_n.rows(n0, nt).view({rows * d.h, d.e}), out_n.rows(n0, nt).view({rows * d.h, d.e}),
               t.delta_tok);
    be.transpose_01(t.delta_tok.view({rows, d.h, 1}), t.delta.view({d.h, rows, 1}));
    be.transpose_01(lse_n.rows(n0, nt).view({nt, d.h, d.t}), t.lse.view({d.h, nt, d.t}));
    for (i64 h0 = 0; h0 < d.h; h0 += tile.heads) {
      const i64 hb = std::min(tile.heads, d.h - h0), b = hb * nt, r = b * d.t;
      const Tensor q = heads_of(t.qkvh, d, nt, 0, h0, hb), k = heads_of(t.qkvh, d, nt, 1, h0, hb);
      const Tensor v = heads_of(t.qkvh, d, nt, 2, h0, hb);
      const Tensor dq = heads_of(t.dqkvh, d, nt, 0, h0, hb), dk = heads_of(t.dqkvh, d, nt, 1, h0, hb);
      const Tensor dv = heads_of(t.dqkvh, d, nt, 2, h0, hb);
      const Tensor dO = t.doh.rows(h0 * nt, b);
      const Tensor s = t.s.rows(0, b);                       // S (fp32), then dP below fp32
      const Tensor p = fp32 ? s : t.p.rows(0, b);             // P, then dS below fp32
      const Tensor dp = fp32 ? t.p.rows(0, b) : s;            // fp32
      const Tensor ds = fp32 ? dp : p;
      be.gemm(q, Transpose::No, k, Transpose::Yes, s, Accumulate::Overwrite, scale);
      be.softmax_rows(s.view({r, d.t}), p.view({r, d.t}), t.lse.rows(h0 * nt, b).view({r}),
                      SoftmaxStats::Given);                                         // P again
      be.gemm(p, Transpose::Yes, dO, Transpose::No, dv, Accumulate::Overwrite);     // dV = P^T dO
      be.gemm(dO, Transpose::No, v, Transpose::Yes, dp, Accumulate::Overwrite);     // dP = dO V^T
      be.softmax_rows_bwd(p.view({r, d.t}), dp.view({r, d.t}), t.delta.rows(h0 * nt, b).view({r}),
                          ds.view({r, d.t}));                                       // dS
      be.gemm(ds, Transpose::No, k, Transpose::No, dq, Accumulate::Overwrite, scale);   // dQ
      be.gemm(ds, Transpose::Yes, q, Transpose::No, dk, Accumulate::Overwrite, scale);  // dK
    }
    be.transpose_01(t.dqkvh.view({3 * d.h, rows, d.e}), dqkv_n.rows(n0, nt).view({rows, 3 * d.h, d.e}));
  }
}

}  // namespace dit
