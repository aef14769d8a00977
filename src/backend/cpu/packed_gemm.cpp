// The packed GEMM of the CPU backend (see packed_gemm.h for the scheme and what results depend on).
#include "backend/cpu/packed_gemm.h"

#include <immintrin.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string_view>

#include "core/error.h"

namespace dit::cpu {

namespace {

constexpr std::int64_t kKC = 256;  // depth block: fixed, so the order of every sum is the shape's alone

std::int64_t round_up(std::int64_t v, std::int64_t to) { return (v + to - 1) / to * to; }
std::int64_t ceil_div(std::int64_t v, std::int64_t by) { return (v + by - 1) / by; }

// d[i * ld + j] = s[j * ls + i] for an 8 x 8 block.
__attribute__((target("avx2"))) void transpose8x8(const float* s, std::int64_t ls, float* d, std::int64_t ld) {
  __m256 r[8], t[8], u[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(s + i * ls);
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int i = 0; i < 4; ++i) {
    _mm256_storeu_ps(d + i * ld, _mm256_permute2f128_ps(u[i], u[i + 4], 0x20));
    _mm256_storeu_ps(d + (i + 4) * ld, _mm256_permute2f128_ps(u[i], u[i + 4], 0x31));
  }
}

bool has_avx2() {
  static const bool on = __builtin_cpu_supports("avx2") != 0 && __builtin_cpu_supports("fma") != 0;
  return on;
}
bool has_avx512() {
  static const bool on = __builtin_cpu_supports("avx512f") != 0;
  return on;
}

// A's rows [i0, i0 + mc), depth [p0, p0 + kc) into panels (ceil(mc / MR), kc, MR); rows past mc are zero.
// A(i, p) is a[i lda + p], or a[p lda + i] when transposed.
template <int MR>
void pack_a(Transpose ta, const float* a, std::int64_t lda, std::int64_t i0, std::int64_t mc, std::int64_t p0,
            std::int64_t kc, float* dst, bool avx2) {
  for (std::int64_t ip = 0; ip * MR < mc; ++ip, dst += kc * MR) {
    const std::int64_t r0 = i0 + ip * MR, rows = std::min<std::int64_t>(MR, mc - ip * MR);
    if (ta == Transpose::Yes) {
      for (std::int64_t p = 0; p < kc; ++p) {
        const float* src = a + (p0 + p) * lda + r0;
        float* d = dst + p * MR;
        std::int64_t r = 0;
        for (; r < rows; ++r) d[r] = src[r];
        for (; r < MR; ++r) d[r] = 0.f;
      }
      continue;
    }
    std::int64_t p = 0;
    if (MR == 8 && rows == 8 && avx2)
      for (; p + 8 <= kc; p += 8) transpose8x8(a + r0 * lda + p0 + p, lda, dst + p * MR, MR);
    for (std::int64_t r = 0; r < MR; ++r) {
      const float* src = a + (r0 + r) * lda + p0;
      for (std::int64_t q = p; q < kc; ++q) dst[q * MR + r] = r < rows ? src[q] : 0.f;
    }
  }
}

// B's depth [p0, p0 + kc), columns [j0, j0 + cols) (cols <= NR) into one strip (kc, NR); columns
// past cols are zero. B(p, j) is b[p ldb + j], or b[j ldb + p] when transposed.
template <int NR>
void pack_b_strip(Transpose tb, const float* b, std::int64_t ldb, std::int64_t p0, std::int64_t kc, std::int64_t j0,
                  std::int64_t cols, float* dst, bool avx2) {
  if (tb == Transpose::No) {
    for (std::int64_t p = 0; p < kc; ++p) {
      float* d = dst + p * NR;
      std::memcpy(d, b + (p0 + p) * ldb + j0, static_cast<std::size_t>(cols) * sizeof(float));
      std::fill(d + cols, d + NR, 0.f);
    }
    return;
  }
  std::int64_t j = 0;
  if (avx2)
    for (; j + 8 <= cols; j += 8) {
      std::int64_t p = 0;
      for (; p + 8 <= kc; p += 8) transpose8x8(b + (j0 + j) * ldb + p0 + p, ldb, dst + p * NR + j, NR);
      for (; p < kc; ++p)
        for (std::int64_t q = j; q < j + 8; ++q) dst[p * NR + q] = b[(j0 + q) * ldb + p0 + p];
    }
  for (; j < NR; ++j) {
    if (j < cols) {
      const float* src = b + (j0 + j) * ldb + p0;
      for (std::int64_t p = 0; p < kc; ++p) dst[p * NR + j] = src[p];
    } else {
      for (std::int64_t p = 0; p < kc; ++p) dst[p * NR + j] = 0.f;
    }
  }
}

// ---- register tiles ---------------------------------------------------------------------------

__attribute__((target("avx512f"))) inline __mmask16 lanes16(int n) {
  return static_cast<__mmask16>(n >= 16 ? 0xFFFFu : n <= 0 ? 0u : (1u << n) - 1u);
}

struct Avx2Tile {
  static constexpr int MR = 6, NR = 16;
  // c (mr x nr of 6 x 16) = (add ? c : 0) + alpha a b.
  __attribute__((target("avx2,fma"))) static void run(const float* a, const float* b, std::int64_t kc, float* c,
                                                       std::int64_t ldc, float alpha, bool add, int mr, int nr) {
    __m256 acc[MR][2];
    for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
#pragma GCC unroll 2
    for (std::int64_t p = 0; p < kc; ++p, a += MR, b += NR) {
      const __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
#pragma GCC unroll 6
      for (int r = 0; r < MR; ++r) {
        const __m256 av = _mm256_broadcast_ss(a + r);
        acc[r][0] = _mm256_fmadd_ps(av, b0, acc[r][0]);
        acc[r][1] = _mm256_fmadd_ps(av, b1, acc[r][1]);
      }
    }
    const __m256 va = _mm256_set1_ps(alpha);
    if (nr == NR) {
      for (int r = 0; r < mr; ++r) {
        float* cr = c + r * ldc;
        for (int h = 0; h < 2; ++h)
          _mm256_storeu_ps(cr + 8 * h, add ? _mm256_fmadd_ps(acc[r][h], va, _mm256_loadu_ps(cr + 8 * h))
                                           : _mm256_mul_ps(acc[r][h], va));
      }
      return;
    }
    // A partial tile: the same one rounding per element as above (alpha acc + c fused).
    alignas(32) float tmp[NR];
    for (int r = 0; r < mr; ++r) {
      float* cr = c + r * ldc;
      _mm256_store_ps(tmp, acc[r][0]);
      _mm256_store_ps(tmp + 8, acc[r][1]);
      for (int j = 0; j < nr; ++j) cr[j] = add ? std::fma(tmp[j], alpha, cr[j]) : tmp[j] * alpha;
    }
  }
};

struct Avx512Tile {
  static constexpr int MR = kTileMR, NR = kTileNR;
  static void run(const float* a, const float* b, std::int64_t kc, float* c, std::int64_t ldc, float alpha, bool add,
                  int mr, int nr) {
    avx512_tile(a, b, kc, c, ldc, alpha, add, mr, nr);
  }
};

// ---- blocking and the driver ------------------------------------------------------------------

struct Blocking {
  std::int64_t mc, nc;  // rows of A a thread packs at once (L2), columns of B packed at once (L3)
};

template <class Tile>
Blocking blocking() {
  static const Blocking b = [] {
    long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE), l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (l2 <= 0) l2 = 256L << 10;
    if (l3 <= 0) l3 = 8L << 20;
    const std::int64_t panel_bytes = kKC * static_cast<std::int64_t>(sizeof(float));
    return Blocking{std::clamp<std::int64_t>(l2 / 2 / panel_bytes / Tile::MR * Tile::MR, 4 * Tile::MR, 1024),
                    std::clamp<std::int64_t>(l3 / 4 / panel_bytes / Tile::NR * Tile::NR, 8 * Tile::NR, 8192)};
  }();
  return b;
}

void scale_c(float beta, std::int64_t m, std::int64_t n, float* c, std::int64_t ldc) {
  for (std::int64_t i = 0; i < m; ++i) {
    float* ci = c + i * ldc;
    if (beta == 0.f)
      std::fill(ci, ci + n, 0.f);
    else
      for (std::int64_t j = 0; j < n; ++j) ci[j] *= beta;
  }
}

// Products below this many multiply-adds run on the calling thread alone.
constexpr double kThreadedMacs = 96.0 * 96.0 * 96.0;

template <class Tile>
void run_packed(Transpose ta, Transpose tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
                const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
                std::int64_t ldc) {
  constexpr int MR = Tile::MR, NR = Tile::NR;
  if (m <= 0 || n <= 0) return;
  if (k == 0 || alpha == 0.f) {
    if (beta != 1.f) scale_c(beta, m, n, c, ldc);
    return;
  }
  if (beta != 0.f && beta != 1.f) {
    scale_c(beta, m, n, c, ldc);
    beta = 1.f;
  }
  const bool overwrite = beta == 0.f;
  const bool avx2 = has_avx2();
  const Blocking bl = blocking<Tile>();
  const std::int64_t nc_max = std::min(bl.nc, round_up(n, NR)), kc_max = std::min(kKC, k);
  int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  if (static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) < kThreadedMacs) threads = 1;
  // Enough rows: the threads take blocks of rows (each its own A in its own L2); otherwise they
  // share one block of rows and take strips of B.
  const bool by_rows = m >= static_cast<std::int64_t>(threads) * 4 * MR;
  std::int64_t mc = std::min(bl.mc, round_up(m, MR));
  if (by_rows) {
    const std::int64_t blocks = round_up(std::max<std::int64_t>(threads, ceil_div(m, bl.mc)), threads);
    mc = round_up(ceil_div(m, blocks), MR);
  }
  float* pb = thread_scratch(4, static_cast<std::size_t>(kc_max * nc_max));

  // The region is opened even for one thread: the worksharing loops below must bind to it, not to
  // a caller's parallel region (the attention calls this from inside one).
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    float* pa = thread_scratch(5, static_cast<std::size_t>(round_up(mc, MR) * kc_max));
    for (std::int64_t jc = 0; jc < n; jc += nc_max) {
      const std::int64_t nc = std::min(nc_max, n - jc), strips = ceil_div(nc, NR);
      for (std::int64_t pc = 0; pc < k; pc += kKC) {
        const std::int64_t kc = std::min(kKC, k - pc);
        const bool add = !overwrite || pc > 0;
#pragma omp for schedule(static)
        for (std::int64_t s = 0; s < strips; ++s)
          pack_b_strip<NR>(tb, b, ldb, pc, kc, jc + s * NR, std::min<std::int64_t>(NR, nc - s * NR),
                           pb + s * kc * NR, avx2);
        auto tiles = [&](std::int64_t i0, std::int64_t rows, std::int64_t s) {
          const float* bs = pb + s * kc * NR;
          const int nr = static_cast<int>(std::min<std::int64_t>(NR, nc - s * NR));
          for (std::int64_t ip = 0; ip * MR < rows; ++ip)
            Tile::run(pa + ip * kc * MR, bs, kc, c + (i0 + ip * MR) * ldc + jc + s * NR, ldc, alpha, add,
                      static_cast<int>(std::min<std::int64_t>(MR, rows - ip * MR)), nr);
        };
        if (by_rows) {
#pragma omp for schedule(static)
          for (std::int64_t i0 = 0; i0 < m; i0 += mc) {
            const std::int64_t rows = std::min(mc, m - i0);
            pack_a<MR>(ta, a, lda, i0, rows, pc, kc, pa, avx2);
            for (std::int64_t s = 0; s < strips; ++s) tiles(i0, rows, s);
          }
        } else {
          for (std::int64_t i0 = 0; i0 < m; i0 += mc) {
            const std::int64_t rows = std::min(mc, m - i0);
            pack_a<MR>(ta, a, lda, i0, rows, pc, kc, pa, avx2);
#pragma omp for schedule(static)
            for (std::int64_t s = 0; s < strips; ++s) tiles(i0, rows, s);
          }
        }
      }
    }
  }
}

}  // namespace

__attribute__((target("avx512f"))) void avx512_tile(const float* a, const float* b, std::int64_t kc, float* c,
                                                    std::int64_t ldc, float alpha, bool add, int mr, int nr) {
  constexpr int MR = kTileMR;
  __m512 acc[MR][2];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
#pragma GCC unroll 2
  for (std::int64_t p = 0; p < kc; ++p, a += MR, b += kTileNR) {
    const __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const __m512 av = _mm512_set1_ps(a[r]);
      acc[r][0] = _mm512_fmadd_ps(av, b0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(av, b1, acc[r][1]);
    }
  }
  const __m512 va = _mm512_set1_ps(alpha);
  if (mr == MR && nr == kTileNR) {
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      float* cr = c + r * ldc;
      for (int h = 0; h < 2; ++h)
        _mm512_storeu_ps(cr + 16 * h, add ? _mm512_fmadd_ps(acc[r][h], va, _mm512_loadu_ps(cr + 16 * h))
                                          : _mm512_mul_ps(acc[r][h], va));
    }
    return;
  }
  const __mmask16 m0 = lanes16(nr), m1 = lanes16(nr - 16);
  for (int r = 0; r < mr; ++r) {
    float* cr = c + r * ldc;
    const __m512 v0 = add ? _mm512_fmadd_ps(acc[r][0], va, _mm512_maskz_loadu_ps(m0, cr)) : _mm512_mul_ps(acc[r][0], va);
    const __m512 v1 = add ? _mm512_fmadd_ps(acc[r][1], va, _mm512_maskz_loadu_ps(m1, cr + 16))
                          : _mm512_mul_ps(acc[r][1], va);
    _mm512_mask_storeu_ps(cr, m0, v0);
    _mm512_mask_storeu_ps(cr + 16, m1, v1);
  }
}

const char* gemm_kernel_name(GemmKernel k) {
  switch (k) {
    case GemmKernel::Avx512: return "avx512";
    case GemmKernel::Avx2: return "avx2";
    case GemmKernel::Eigen: return "eigen";
  }
  return "?";
}

GemmKernel choose_gemm_kernel(const char* value) {
  const std::string_view v = value == nullptr ? "" : value;
  if (v.empty() || v == "auto") return has_avx512() ? GemmKernel::Avx512 : has_avx2() ? GemmKernel::Avx2 : GemmKernel::Eigen;
  if (v == "eigen") return GemmKernel::Eigen;
  if (v == "avx512") {
    DIT_CHECK(has_avx512(), "DIT_CPU_GEMM=avx512: this CPU has no AVX-512F (expected auto, ",
              has_avx2() ? "avx2 or " : "", "eigen here)");
    return GemmKernel::Avx512;
  }
  if (v == "avx2") {
    DIT_CHECK(has_avx2(), "DIT_CPU_GEMM=avx2: this CPU has no AVX2 with FMA (expected auto or eigen here)");
    return GemmKernel::Avx2;
  }
  DIT_FAIL("DIT_CPU_GEMM=", v, ": expected auto, avx512, avx2 or eigen");
}

GemmKernel gemm_kernel() {
  static const GemmKernel k = choose_gemm_kernel(std::getenv("DIT_CPU_GEMM"));
  return k;
}

void packed_sgemm(GemmKernel kernel, Transpose ta, Transpose tb, std::int64_t m, std::int64_t n, std::int64_t k,
                  float alpha, const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta,
                  float* c, std::int64_t ldc) {
  if (kernel == GemmKernel::Avx512)
    run_packed<Avx512Tile>(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  else if (kernel == GemmKernel::Avx2)
    run_packed<Avx2Tile>(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  else
    DIT_FAIL("packed_sgemm: the eigen kernel is not a packed one");
}

float* thread_scratch(int slot, std::size_t floats) {
  constexpr int kSlots = 6;
  DIT_CHECK(slot >= 0 && slot < kSlots, "thread_scratch: slot ", slot, " out of range");
  thread_local std::unique_ptr<float[]> buf[kSlots];
  thread_local float* aligned[kSlots] = {};
  thread_local std::size_t size[kSlots] = {};
  if (size[slot] < floats) {
    buf[slot].reset(new float[floats + 16]);
    const auto addr = reinterpret_cast<std::uintptr_t>(buf[slot].get());
    aligned[slot] = buf[slot].get() + ((64 - addr % 64) % 64) / sizeof(float);
    size[slot] = floats;
  }
  return aligned[slot];
}

}  // namespace dit::cpu
