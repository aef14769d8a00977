// Plain double-precision reference implementations of every Backend primitive, written from the
// math (not from any backend, and not from math.h), so backend tests compare against an
// independent oracle; with them the tolerance rule and central finite differences. Header-only;
// tensors are dense row-major std::vector<double>.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <numbers>
#include <vector>

#include "backend/backend.h"
#include "core/dtype.h"

namespace dit::ref {

using Vec = std::vector<double>;
using i64 = std::int64_t;

// ---- the tolerance rule ---------------------------------------------------------------------

// Relative L2 error ||got - want|| / ||want|| of one tensor (0 when both are zero).
template <typename T>
double rel_l2(const std::vector<T>& got, const Vec& want) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    num += d * d;
    den += want[i] * want[i];
  }
  if (den == 0) return num == 0 ? 0.0 : INFINITY;
  return std::sqrt(num / den);
}

// The project's tolerance of an op against a double reference, by the dtype it computes in.
inline double tolerance(DType t) {
  switch (t) {
    case DType::F32:
      return 1e-5;
    case DType::BF16:
    case DType::F16:  // 16-bit storage: the one rule for mixed precision
      return 2e-2;
    default:
      break;
  }
  DIT_FAIL("no tolerance rule for ", dtype_name(t));
}

// A double-precision backward against central differences of the double forward: the
// difference quotient with h = 1e-5 errs by O(h^2) ~ 1e-10 plus roundoff ~ 1e-11 relative.
constexpr double kFiniteDiffStep = 1e-5;
constexpr double kFiniteDiffTol = 1e-7;

// Gradient of a scalar function f(x) by central differences.
template <typename F>
Vec numeric_grad(const F& f, Vec x, double h = kFiniteDiffStep) {
  Vec g(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double xi = x[i];
    x[i] = xi + h;
    const double fp = f(x);
    x[i] = xi - h;
    const double fm = f(x);
    x[i] = xi;
    g[i] = (fp - fm) / (2 * h);
  }
  return g;
}

inline double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// ---- bf16 ------------------------------------------------------------------------------------

// fp32 -> bf16 bits, rounded to nearest with ties to even, decided by comparing distances in
// double to the two neighbouring bf16 values (not by the usual bit trick). Not for NaN.
inline std::uint16_t bf16_round_nearest_even(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  const std::uint32_t sign = (u >> 16) & 0x8000u, mag = u & 0x7fffffffu;
  if (mag == 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7f80u);
  auto value = [](std::uint32_t b) {  // magnitude of bf16 bits b; the successor of max is 2^128
    if (b == 0x7f80u) return std::ldexp(1.0, 128);
    const std::uint32_t w = b << 16;
    float x;
    std::memcpy(&x, &w, 4);
    return static_cast<double>(x);
  };
  const std::uint32_t lo = mag >> 16, hi = lo + 1;
  const double v = std::fabs(static_cast<double>(f));
  const double dlo = v - value(lo), dhi = value(hi) - v;
  const std::uint32_t r = dlo < dhi ? lo : dhi < dlo ? hi : (lo % 2 ? hi : lo);
  return static_cast<std::uint16_t>(sign | r);
}

// ---- dense algebra ---------------------------------------------------------------------------

struct GemmShape {
  i64 batch, m, n, k;
};
// C (batch, m, n) = alpha op(A) op(B) (+ c_in when given); A is stored (m, k), or (k, m) when
// transposed; B is stored (k, n), or (n, k).
inline Vec gemm(const Vec& a, Transpose ta, const Vec& b, Transpose tb, const GemmShape& s,
                double alpha, const Vec* c_in) {
  Vec c(s.batch * s.m * s.n);
  for (i64 bt = 0; bt < s.batch; ++bt) {
    const double* pa = a.data() + bt * s.m * s.k;
    const double* pb = b.data() + bt * s.k * s.n;
    for (i64 i = 0; i < s.m; ++i)
      for (i64 j = 0; j < s.n; ++j) {
        double acc = 0;
        for (i64 p = 0; p < s.k; ++p) {
          const double av = ta == Transpose::No ? pa[i * s.k + p] : pa[p * s.m + i];
          const double bv = tb == Transpose::No ? pb[p * s.n + j] : pb[j * s.k + p];
          acc += av * bv;
        }
        const i64 o = (bt * s.m + i) * s.n + j;
        c[o] = alpha * acc + (c_in ? (*c_in)[o] : 0.0);
      }
  }
  return c;
}

// y[r, :] + v for every row r of y viewed as (rows, v.size())
inline Vec add_rowwise(Vec y, const Vec& v) {
  for (std::size_t i = 0; i < y.size(); ++i) y[i] += v[i % v.size()];
  return y;
}

// out (l) = sum over rows of x (rows, l)
inline Vec sum_rows(const Vec& x, i64 l) {
  Vec out(l, 0.0);
  for (std::size_t i = 0; i < x.size(); ++i) out[i % l] += x[i];
  return out;
}

// dst (b, a, c) = src (a, b, c) with the leading dims swapped
inline Vec transpose_01(const Vec& src, i64 a, i64 b, i64 c) {
  Vec dst(src.size());
  for (i64 i = 0; i < a; ++i)
    for (i64 j = 0; j < b; ++j)
      for (i64 e = 0; e < c; ++e) dst[(j * a + i) * c + e] = src[(i * b + j) * c + e];
  return dst;
}

// ---- activations -----------------------------------------------------------------------------

// GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
inline double gelu_tanh(double x) {
  const double k = std::sqrt(2.0 / std::numbers::pi);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}
inline double gelu_tanh_grad(double x) {
  const double k = std::sqrt(2.0 / std::numbers::pi);
  const double th = std::tanh(k * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * k * (1.0 + 3.0 * 0.044715 * x * x);
}
inline double silu(double x) { return x / (1.0 + std::exp(-x)); }
inline double silu_grad(double x) {
  const double s = 1.0 / (1.0 + std::exp(-x));
  return s + x * s * (1.0 - s);
}

template <typename F>
Vec map(const Vec& x, const F& f) {
  Vec y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) y[i] = f(x[i]);
  return y;
}

// ---- adaLN -----------------------------------------------------------------------------------

struct Tokens {
  i64 n, t, d;
};

// Chunk `index` of a (N, K*D) modulation tensor as an (N, D) tensor, and the reverse.
inline Vec chunk(const Vec& mod, i64 n, i64 k, i64 d, int index) {
  Vec c(n * d);
  for (i64 b = 0; b < n; ++b)
    for (i64 i = 0; i < d; ++i) c[b * d + i] = mod[b * k * d + index * d + i];
  return c;
}
inline void put_chunk(Vec& mod, const Vec& c, i64 n, i64 k, i64 d, int index) {
  for (i64 b = 0; b < n; ++b)
    for (i64 i = 0; i < d; ++i) mod[b * k * d + index * d + i] = c[b * d + i];
}

struct LnOut {
  Vec y, mean, rstd;  // (N, T, D), (N*T), (N*T)
};
// y = (x - mean) / sqrt(var + eps) * (1 + scale) + shift, biased variance per token over D;
// shift and scale (N, D) broadcast over T.
inline LnOut ln_modulate_fwd(const Vec& x, const Tokens& g, const Vec& shift, const Vec& scale,
                             double eps) {
  LnOut o{Vec(x.size()), Vec(g.n * g.t), Vec(g.n * g.t)};
  for (i64 row = 0; row < g.n * g.t; ++row) {
    const double* xr = x.data() + row * g.d;
    double mu = 0, var = 0;
    for (i64 i = 0; i < g.d; ++i) mu += xr[i];
    mu /= g.d;
    for (i64 i = 0; i < g.d; ++i) var += (xr[i] - mu) * (xr[i] - mu);
    var /= g.d;
    const double r = 1.0 / std::sqrt(var + eps);
    const i64 b = row / g.t;
    for (i64 i = 0; i < g.d; ++i)
      o.y[row * g.d + i] = (xr[i] - mu) * r * (1.0 + scale[b * g.d + i]) + shift[b * g.d + i];
    o.mean[row] = mu;
    o.rstd[row] = r;
  }
  return o;
}

struct LnGrads {
  Vec dx, dshift, dscale;  // (N, T, D), (N, D), (N, D)
};
// With xn = (x - mean) rstd and g = dy (1 + scale):
//   dx = rstd (g - mean_D(g) - xn mean_D(g xn)),  dshift = sum_T dy,  dscale = sum_T dy xn.
inline LnGrads ln_modulate_bwd(const Vec& dy, const Vec& x, const Tokens& g, const Vec& scale,
                               double eps) {
  const LnOut f = ln_modulate_fwd(x, g, Vec(g.n * g.d, 0.0), Vec(g.n * g.d, 0.0), eps);
  LnGrads o{Vec(x.size()), Vec(g.n * g.d, 0.0), Vec(g.n * g.d, 0.0)};
  for (i64 row = 0; row < g.n * g.t; ++row) {
    const i64 b = row / g.t;
    const double* xn = f.y.data() + row * g.d;  // with zero shift and scale, y is xn
    double mg = 0, mgx = 0;
    for (i64 i = 0; i < g.d; ++i) {
      const double gi = dy[row * g.d + i] * (1.0 + scale[b * g.d + i]);
      mg += gi / g.d;
      mgx += gi * xn[i] / g.d;
      o.dshift[b * g.d + i] += dy[row * g.d + i];
      o.dscale[b * g.d + i] += dy[row * g.d + i] * xn[i];
    }
    for (i64 i = 0; i < g.d; ++i) {
      const double gi = dy[row * g.d + i] * (1.0 + scale[b * g.d + i]);
      o.dx[row * g.d + i] = f.rstd[row] * (gi - mg - xn[i] * mgx);
    }
  }
  return o;
}

// x + gate * h, gate (N, D) broadcast over T
inline Vec gate_residual_fwd(Vec x, const Vec& h, const Vec& gate, const Tokens& g) {
  for (i64 i = 0; i < g.n * g.t * g.d; ++i) x[i] += gate[(i / (g.t * g.d)) * g.d + i % g.d] * h[i];
  return x;
}
struct GateGrads {
  Vec dh, dgate;  // (N, T, D), (N, D)
};
inline GateGrads gate_residual_bwd(const Vec& dx, const Vec& h, const Vec& gate, const Tokens& g) {
  GateGrads o{Vec(dx.size()), Vec(g.n * g.d, 0.0)};
  for (i64 i = 0; i < g.n * g.t * g.d; ++i) {
    const i64 gi = (i / (g.t * g.d)) * g.d + i % g.d;
    o.dh[i] = gate[gi] * dx[i];
    o.dgate[gi] += dx[i] * h[i];
  }
  return o;
}

// ---- attention -------------------------------------------------------------------------------

struct AttnShape {
  i64 n, t, h, e;
  i64 width() const { return 3 * h * e; }  // of a qkv row
  // Offset in qkv of element e of head hd of block w (0 q, 1 k, 2 v) of token (b, tok).
  i64 at(i64 b, i64 tok, int w, i64 hd, i64 e_) const {
    return (b * t + tok) * width() + w * h * e + hd * e + e_;
  }
};

// Softmax probabilities P (T, T) of one (sample, head) and the row logsumexp of the scores
// S = q k^T / sqrt(E).
inline void attention_probs(const Vec& qkv, const AttnShape& s, i64 b, i64 hd, Vec& p, Vec& lse) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.e));
  p.assign(s.t * s.t, 0.0);
  lse.assign(s.t, 0.0);
  for (i64 i = 0; i < s.t; ++i) {
    double mx = -INFINITY;
    for (i64 j = 0; j < s.t; ++j) {
      double acc = 0;
      for (i64 e = 0; e < s.e; ++e) acc += qkv[s.at(b, i, 0, hd, e)] * qkv[s.at(b, j, 1, hd, e)];
      p[i * s.t + j] = acc * scale;
      mx = std::max(mx, acc * scale);
    }
    double sum = 0;
    for (i64 j = 0; j < s.t; ++j) sum += std::exp(p[i * s.t + j] - mx);
    lse[i] = mx + std::log(sum);
    for (i64 j = 0; j < s.t; ++j) p[i * s.t + j] = std::exp(p[i * s.t + j] - lse[i]);
  }
}

struct AttnOut {
  Vec out, lse;  // (N, T, H*E), (N, H, T)
};
inline AttnOut attention_fwd(const Vec& qkv, const AttnShape& s) {
  AttnOut o{Vec(s.n * s.t * s.h * s.e, 0.0), Vec(s.n * s.h * s.t)};
  Vec p, lse;
  for (i64 b = 0; b < s.n; ++b)
    for (i64 hd = 0; hd < s.h; ++hd) {
      attention_probs(qkv, s, b, hd, p, lse);
      for (i64 i = 0; i < s.t; ++i) {
        o.lse[(b * s.h + hd) * s.t + i] = lse[i];
        for (i64 e = 0; e < s.e; ++e) {
          double acc = 0;
          for (i64 j = 0; j < s.t; ++j) acc += p[i * s.t + j] * qkv[s.at(b, j, 2, hd, e)];
          o.out[((b * s.t + i) * s.h + hd) * s.e + e] = acc;
        }
      }
    }
  return o;
}

// dV = P^T dO;  dP = dO V^T;  dS = P (dP - rowsum(P dP));  dQ = dS K / sqrt(E);  dK = dS^T Q /
// sqrt(E)
inline Vec attention_bwd(const Vec& qkv, const Vec& dout, const AttnShape& s) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.e));
  Vec dqkv(qkv.size(), 0.0), p, lse, ds(s.t * s.t);
  auto dout_at = [&](i64 b, i64 i, i64 hd, i64 e) {
    return dout[((b * s.t + i) * s.h + hd) * s.e + e];
  };
  for (i64 b = 0; b < s.n; ++b)
    for (i64 hd = 0; hd < s.h; ++hd) {
      attention_probs(qkv, s, b, hd, p, lse);
      for (i64 i = 0; i < s.t; ++i) {
        double rowdot = 0;
        for (i64 j = 0; j < s.t; ++j) {
          double dp = 0;
          for (i64 e = 0; e < s.e; ++e) dp += dout_at(b, i, hd, e) * qkv[s.at(b, j, 2, hd, e)];
          ds[i * s.t + j] = dp;
          rowdot += p[i * s.t + j] * dp;
        }
        for (i64 j = 0; j < s.t; ++j) ds[i * s.t + j] = p[i * s.t + j] * (ds[i * s.t + j] - rowdot);
      }
      for (i64 i = 0; i < s.t; ++i)
        for (i64 j = 0; j < s.t; ++j)
          for (i64 e = 0; e < s.e; ++e) {
            dqkv[s.at(b, i, 0, hd, e)] += scale * ds[i * s.t + j] * qkv[s.at(b, j, 1, hd, e)];
            dqkv[s.at(b, j, 1, hd, e)] += scale * ds[i * s.t + j] * qkv[s.at(b, i, 0, hd, e)];
            dqkv[s.at(b, j, 2, hd, e)] += p[i * s.t + j] * dout_at(b, i, hd, e);
          }
    }
  return dqkv;
}

// ---- embeddings ------------------------------------------------------------------------------

// out (N, D) = table[ids]
inline Vec embedding_fwd(const Vec& table, const std::vector<std::int32_t>& ids, i64 d) {
  Vec out(ids.size() * d);
  for (std::size_t n = 0; n < ids.size(); ++n)
    for (i64 i = 0; i < d; ++i) out[n * d + i] = table[ids[n] * d + i];
  return out;
}
// dtable[ids[n]] += dout[n]
inline Vec embedding_bwd(const Vec& dout, const std::vector<std::int32_t>& ids, Vec dtable, i64 d) {
  for (std::size_t n = 0; n < ids.size(); ++n)
    for (i64 i = 0; i < d; ++i) dtable[ids[n] * d + i] += dout[n * d + i];
  return dtable;
}

// DiT's TimestepEmbedder.timestep_embedding: half = F/2, f_i = exp(-ln(max_period) i / half),
// out[n] = [cos(t_n f), sin(t_n f)] and a zero column when F is odd.
inline Vec timestep_embedding(const Vec& t, double max_period, i64 f) {
  const i64 half = f / 2;
  Vec out(t.size() * f, 0.0);
  for (std::size_t n = 0; n < t.size(); ++n)
    for (i64 i = 0; i < half; ++i) {
      const double freq = std::exp(-std::log(max_period) * static_cast<double>(i) / half);
      out[n * f + i] = std::cos(t[n] * freq);
      out[n * f + half + i] = std::sin(t[n] * freq);
    }
  return out;
}

struct Image {
  i64 n, c, h, w;
};
// Index in img (N, C, H, W) of feature f of token tok of sample b in patches (N, T, C p p):
// the token is patch (tok / (W/p), tok % (W/p)) of the grid; f is (c, i, j) ChannelMajor or
// (i, j, c) ChannelMinor.
inline i64 patch_source(const Image& s, int p, PatchOrder order, i64 b, i64 tok, i64 f) {
  i64 c, i, j;
  if (order == PatchOrder::ChannelMajor) {
    c = f / (p * p), i = f / p % p, j = f % p;
  } else {
    i = f / (p * s.c), j = f / s.c % p, c = f % s.c;
  }
  const i64 gw = s.w / p, y = tok / gw * p + i, x = tok % gw * p + j;
  return ((b * s.c + c) * s.h + y) * s.w + x;
}
inline Vec patchify(const Vec& img, const Image& s, int p, PatchOrder order) {
  const i64 tokens = (s.h / p) * (s.w / p), feat = s.c * p * p;
  Vec out(img.size());
  for (i64 b = 0; b < s.n; ++b)
    for (i64 tok = 0; tok < tokens; ++tok)
      for (i64 f = 0; f < feat; ++f)
        out[(b * tokens + tok) * feat + f] = img[patch_source(s, p, order, b, tok, f)];
  return out;
}
inline Vec unpatchify(const Vec& patches, const Image& s, int p, PatchOrder order) {
  const i64 tokens = (s.h / p) * (s.w / p), feat = s.c * p * p;
  Vec img(patches.size());
  for (i64 b = 0; b < s.n; ++b)
    for (i64 tok = 0; tok < tokens; ++tok)
      for (i64 f = 0; f < feat; ++f)
        img[patch_source(s, p, order, b, tok, f)] = patches[(b * tokens + tok) * feat + f];
  return img;
}

// ---- optimizer -------------------------------------------------------------------------------

struct AdamW {
  double lr, beta1, beta2, eps, weight_decay;
};
// torch.optim.AdamW step `step` (from 1): p -= lr wd p; m, v moments; bias-corrected update
// p -= lr / bc1 * m / (sqrt(v / bc2) + eps), bc1 = 1 - beta1^step, bc2 = 1 - beta2^step.
inline void adamw_step(Vec& p, const Vec& g, Vec& m, Vec& v, const AdamW& h, int step) {
  const double bc1 = 1.0 - std::pow(h.beta1, step), bc2 = 1.0 - std::pow(h.beta2, step);
  for (std::size_t i = 0; i < p.size(); ++i) {
    p[i] -= h.lr * h.weight_decay * p[i];
    m[i] = h.beta1 * m[i] + (1.0 - h.beta1) * g[i];
    v[i] = h.beta2 * v[i] + (1.0 - h.beta2) * g[i] * g[i];
    p[i] -= h.lr / bc1 * m[i] / (std::sqrt(v[i] / bc2) + h.eps);
  }
}

// ema = decay ema + (1 - decay) p
inline void ema_step(Vec& ema, const Vec& p, double decay) {
  for (std::size_t i = 0; i < ema.size(); ++i) ema[i] = decay * ema[i] + (1.0 - decay) * p[i];
}

}  // namespace dit::ref
