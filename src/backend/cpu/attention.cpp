// Fused multi-head attention for the CPU backend, flash-attention style: queries are processed in
// blocks, scores live only in a per-thread (block x T) scratch, and backward recomputes them from
// the saved row logsumexp. One OpenMP task per (sample, head); GEMMs read q, k, v in place from
// the fused qkv rows through leading dimensions, so nothing is transposed or copied.
// Under DIT_ATTENTION=composed the two entry points run the composed attention instead, over the
// row primitives at the end of this file (softmax_rows, softmax_rows_bwd, row_dot).
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/math.h"

namespace dit {

namespace {

constexpr std::int64_t kQueryBlock = 64;

struct AttnGeom {
  std::int64_t n, t, h, e;  // batch, tokens, heads, head dim
  std::int64_t ld_qkv() const { return 3 * h * e; }
  std::int64_t ld_out() const { return h * e; }
};

AttnGeom attn_geom(const Tensor& qkv, int heads, const Tensor& out, const Tensor& lse) {
  DIT_CHECK(qkv.shape.rank == 3 && heads > 0 && qkv.dim(2) % (3 * heads) == 0,
            "attention: qkv ", qkv.shape.str(), " is not (N, T, 3 * ", heads, " * E)");
  AttnGeom g{qkv.dim(0), qkv.dim(1), heads, qkv.dim(2) / (3 * heads)};
  DIT_CHECK(out.numel() == g.n * g.t * g.h * g.e && lse.numel() == g.n * g.h * g.t,
            "attention: out ", out.shape.str(), " or lse ", lse.shape.str(), " does not match qkv ",
            qkv.shape.str());
  DIT_CHECK(qkv.dtype == DType::F32 && out.dtype == DType::F32 && lse.dtype == DType::F32,
            "attention: the CPU backend computes in fp32");
  return g;
}

// s (rows x t) = scale * q k^T, then each row is turned into exp(s - lse_row).
// In forward (lse == nullptr) the row max and sum are computed and lse is written to lse_out.
void scores_to_probs(float* s, std::int64_t rows, std::int64_t t, const float* lse, float* lse_out) {
  for (std::int64_t r = 0; r < rows; ++r) {
    float* sr = s + r * t;
    float sub;
    if (lse) {
      sub = lse[r];
    } else {
      sub = *std::max_element(sr, sr + t);
    }
    for (std::int64_t j = 0; j < t; ++j) sr[j] = math::exp_f32(sr[j] - sub);
    double sum = 0;
    for (std::int64_t j = 0; j < t; ++j) sum += sr[j];
    if (!lse) {
      const float inv = static_cast<float>(1.0 / sum);
      for (std::int64_t j = 0; j < t; ++j) sr[j] *= inv;
      lse_out[r] = sub + static_cast<float>(std::log(sum));
    }
  }
}

}  // namespace

CpuBackend::CpuBackend() : attention_path_(attention_path_from_env()) {}
CpuBackend::~CpuBackend() = default;

std::size_t CpuBackend::workspace_bytes() const { return composed_ ? composed_->workspace_bytes() : 0; }

std::string CpuBackend::attention_note() const {
  return attention_path_ == AttentionPath::Composed ? "composed attention (DIT_ATTENTION=composed)" : "";
}

void CpuBackend::attention_fwd(const Tensor& qkv, int heads, const Tensor& out, const Tensor& lse) {
  if (attention_path_ == AttentionPath::Composed) {
    if (!composed_) composed_ = std::make_unique<ComposedAttention>(*this);
    return composed_->forward(*this, qkv, heads, out, lse);
  }
  const AttnGeom g = attn_geom(qkv, heads, out, lse);
  const float scale = 1.f / std::sqrt(static_cast<float>(g.e));
  const float* pq = qkv.as<float>();
  float* po = out.as<float>();
  float* pl = lse.as<float>();
#pragma omp parallel
  {
    std::vector<float> s(kQueryBlock * g.t);
#pragma omp for schedule(dynamic) collapse(2)
    for (std::int64_t n = 0; n < g.n; ++n)
      for (std::int64_t h = 0; h < g.h; ++h) {
        const float* q = pq + n * g.t * g.ld_qkv() + h * g.e;
        const float* k = q + g.h * g.e;
        const float* v = k + g.h * g.e;
        float* o = po + n * g.t * g.ld_out() + h * g.e;
        float* l = pl + (n * g.h + h) * g.t;
        for (std::int64_t r0 = 0; r0 < g.t; r0 += kQueryBlock) {
          const std::int64_t rows = std::min(kQueryBlock, g.t - r0);
          cpu_sgemm(Transpose::No, Transpose::Yes, rows, g.t, g.e, scale, q + r0 * g.ld_qkv(),
                    g.ld_qkv(), k, g.ld_qkv(), 0.f, s.data(), g.t);
          scores_to_probs(s.data(), rows, g.t, nullptr, l + r0);
          cpu_sgemm(Transpose::No, Transpose::No, rows, g.e, g.t, 1.f, s.data(), g.t, v,
                    g.ld_qkv(), 0.f, o + r0 * g.ld_out(), g.ld_out());
        }
      }
  }
}

void CpuBackend::attention_bwd(const Tensor& qkv, const Tensor& out, const Tensor& lse,
                               const Tensor& dout, int heads, const Tensor& dqkv) {
  if (attention_path_ == AttentionPath::Composed) {
    if (!composed_) composed_ = std::make_unique<ComposedAttention>(*this);
    return composed_->backward(*this, qkv, out, lse, dout, heads, dqkv);
  }
  const AttnGeom g = attn_geom(qkv, heads, out, lse);
  DIT_CHECK(dout.numel() == out.numel() && dqkv.numel() == qkv.numel() &&
                dout.dtype == DType::F32 && dqkv.dtype == DType::F32,
            "attention_bwd: dout ", dout.shape.str(), " / dqkv ", dqkv.shape.str(),
            " do not match out / qkv");
  const float scale = 1.f / std::sqrt(static_cast<float>(g.e));
  const float* pq = qkv.as<float>();
  const float* po = out.as<float>();
  const float* pdo = dout.as<float>();
  const float* pl = lse.as<float>();
  float* pdq = dqkv.as<float>();
#pragma omp parallel
  {
    std::vector<float> p(kQueryBlock * g.t), dp(kQueryBlock * g.t), di(kQueryBlock);
#pragma omp for schedule(dynamic) collapse(2)
    for (std::int64_t n = 0; n < g.n; ++n)
      for (std::int64_t h = 0; h < g.h; ++h) {
        const std::int64_t qoff = n * g.t * g.ld_qkv() + h * g.e, ooff = n * g.t * g.ld_out() + h * g.e;
        const float* q = pq + qoff;
        const float* k = q + g.h * g.e;
        const float* v = k + g.h * g.e;
        const float* o = po + ooff;
        const float* dout_h = pdo + ooff;
        float* dq = pdq + qoff;
        float* dk = dq + g.h * g.e;
        float* dv = dk + g.h * g.e;
        const float* l = pl + (n * g.h + h) * g.t;
        for (std::int64_t r0 = 0; r0 < g.t; r0 += kQueryBlock) {
          const std::int64_t rows = std::min(kQueryBlock, g.t - r0);
          const float beta = r0 == 0 ? 0.f : 1.f;  // dk, dv: first block overwrites
          // P = exp(scale q k^T - lse)
          cpu_sgemm(Transpose::No, Transpose::Yes, rows, g.t, g.e, scale, q + r0 * g.ld_qkv(),
                    g.ld_qkv(), k, g.ld_qkv(), 0.f, p.data(), g.t);
          scores_to_probs(p.data(), rows, g.t, l + r0, nullptr);
          // dV += P^T dO
          cpu_sgemm(Transpose::Yes, Transpose::No, g.t, g.e, rows, 1.f, p.data(), g.t,
                    dout_h + r0 * g.ld_out(), g.ld_out(), beta, dv, g.ld_qkv());
          // dP = dO V^T;  dS = P (dP - rowsum(dO o O))
          cpu_sgemm(Transpose::No, Transpose::Yes, rows, g.t, g.e, 1.f, dout_h + r0 * g.ld_out(),
                    g.ld_out(), v, g.ld_qkv(), 0.f, dp.data(), g.t);
          for (std::int64_t r = 0; r < rows; ++r) {
            double d = 0;
            for (std::int64_t j = 0; j < g.e; ++j)
              d += dout_h[(r0 + r) * g.ld_out() + j] * o[(r0 + r) * g.ld_out() + j];
            const float dr = static_cast<float>(d);
            for (std::int64_t j = 0; j < g.t; ++j)
              dp[r * g.t + j] = p[r * g.t + j] * (dp[r * g.t + j] - dr);
          }
          // dQ = scale dS K;  dK += scale dS^T Q
          cpu_sgemm(Transpose::No, Transpose::No, rows, g.e, g.t, scale, dp.data(), g.t, k,
                    g.ld_qkv(), 0.f, dq + r0 * g.ld_qkv(), g.ld_qkv());
          cpu_sgemm(Transpose::Yes, Transpose::No, g.t, g.e, rows, scale, dp.data(), g.t,
                    q + r0 * g.ld_qkv(), g.ld_qkv(), beta, dk, g.ld_qkv());
        }
      }
  }
}

// ---- the composed attention's row steps ----------------------------------------------------

namespace {
// (rows, length) of a 2-D fp32 host tensor, checked.
// (Callers name the two as plain variables: clang's OpenMP regions cannot capture structured
// bindings.)
std::pair<std::int64_t, std::int64_t> rows_of(const Tensor& t, const char* what) {
  DIT_CHECK(t.shape.rank == 2 && t.dtype == DType::F32 && t.device == Device::Host, what,
            ": expected a 2-D fp32 host tensor, got ", t.shape.str(), " ", dtype_name(t.dtype));
  return {t.dim(0), t.dim(1)};
}
}  // namespace

void CpuBackend::softmax_rows(const Tensor& s, const Tensor& p, const Tensor& lse, SoftmaxStats stats) {
  const auto rl = rows_of(s, "softmax_rows s");
  const std::int64_t rows = rl.first, len = rl.second;
  DIT_CHECK(p.shape == s.shape && p.dtype == DType::F32 && lse.numel() == rows &&
                lse.dtype == DType::F32,
            "softmax_rows: p ", p.shape.str(), " and lse ", lse.shape.str(), " for s ", s.shape.str());
  const float* ps = s.f32();
  float* pp = p.f32();
  float* pl = lse.f32();
#pragma omp parallel for schedule(static) if (rows * len > 65536)
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* sr = ps + r * len;
    float* pr = pp + r * len;
    float sub = pl[r];
    if (stats == SoftmaxStats::Compute) {
      const float m = *std::max_element(sr, sr + len);
      double sum = 0;
      for (std::int64_t j = 0; j < len; ++j) sum += math::exp_f32(sr[j] - m);
      sub = m + static_cast<float>(std::log(sum));
      pl[r] = sub;
    }
    for (std::int64_t j = 0; j < len; ++j) pr[j] = math::exp_f32(sr[j] - sub);
  }
}

void CpuBackend::softmax_rows_bwd(const Tensor& p, const Tensor& dp, const Tensor& delta,
                                  const Tensor& ds) {
  const auto rl = rows_of(p, "softmax_rows_bwd p");
  const std::int64_t rows = rl.first, len = rl.second;
  DIT_CHECK(dp.shape == p.shape && ds.shape == p.shape && dp.dtype == DType::F32 &&
                ds.dtype == DType::F32 && delta.numel() == rows && delta.dtype == DType::F32,
            "softmax_rows_bwd: dp ", dp.shape.str(), ", ds ", ds.shape.str(), " and delta ",
            delta.shape.str(), " for p ", p.shape.str());
  const float* pp = p.f32();
  const float* pdp = dp.f32();
  const float* pd = delta.f32();
  float* pds = ds.f32();
#pragma omp parallel for schedule(static) if (rows * len > 65536)
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t j = 0; j < len; ++j)
      pds[r * len + j] = math::softmax_grad(pp[r * len + j], pdp[r * len + j], pd[r]);
}

void CpuBackend::row_dot(const Tensor& a, const Tensor& b, const Tensor& out) {
  const auto rl = rows_of(a, "row_dot a");
  const std::int64_t rows = rl.first, len = rl.second;
  DIT_CHECK(b.shape == a.shape && b.dtype == DType::F32 && out.numel() == rows &&
                out.dtype == DType::F32,
            "row_dot: b ", b.shape.str(), " and out ", out.shape.str(), " for a ", a.shape.str());
  const float* pa = a.f32();
  const float* pb = b.f32();
  float* po = out.f32();
#pragma omp parallel for schedule(static) if (rows * len > 65536)
  for (std::int64_t r = 0; r < rows; ++r) {
    double d = 0;
    for (std::int64_t j = 0; j < len; ++j) d += static_cast<double>(pa[r * len + j]) * pb[r * len + j];
    po[r] = static_cast<float>(d);
  }
}

}  // namespace dit
