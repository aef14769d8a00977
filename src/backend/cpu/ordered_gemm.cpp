// The fixed-order GEMM (ordered_gemm.h). Two kernels, both over 8-float vectors (GCC vector
// extensions: AVX with the build's -mavx2, SSE pairs without): A B as 4 x 32 register tiles of C,
// each element summed over k from 0 up; A B^T as dot products of rows, each element in eight
// lanes over k then the lanes added in a fixed tree. Both sum k in blocks of kDepth in float and
// add the blocks' sums in double, so a long k (a weight gradient sums every pixel of a batch)
// loses no more than a block's worth of precision. A transposed A is copied first. OpenMP splits
// C's tiles among threads; no element is split, so no sum depends on the thread count.
#include "backend/cpu/ordered_gemm.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace dit {

namespace {

using i64 = std::int64_t;
typedef float v8 __attribute__((vector_size(32)));  // NOLINT: GCC/Clang vector extension

constexpr int kRows = 4, kVecs = 4, kCols = kVecs * 8;  // a C tile of 4 x 32
constexpr i64 kDepth = 256;                             // k summed in float before the double sum

v8 load(const float* p) {
  v8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
v8 splat(float x) { return v8{x, x, x, x, x, x, x, x}; }

// C = alpha * sum + beta * C for one element (beta 0: C is not read).
void put(float* c, double total, float alpha, float beta) {
  const float sum = static_cast<float>(total);
  *c = beta == 0.f ? alpha * sum : alpha * sum + beta * *c;
}

// C (m x n) from A (m x k) and B (k x n), both not transposed.
void gemm_nn(i64 m, i64 n, i64 k, float alpha, const float* a, i64 lda, const float* b, i64 ldb, float beta,
             float* c, i64 ldc) {
  const i64 row_tiles = (m + kRows - 1) / kRows, col_tiles = (n + kCols - 1) / kCols;
#pragma omp parallel for collapse(2) schedule(static)
  for (i64 ct = 0; ct < col_tiles; ++ct)  // neighbouring tiles share B's 32 columns (in cache)
    for (i64 rt = 0; rt < row_tiles; ++rt) {
      const i64 i0 = rt * kRows, j0 = ct * kCols;
      if (i0 + kRows <= m && j0 + kCols <= n) {  // a full tile: 16 accumulators in registers
        double total[kRows][kCols] = {};
        for (i64 p0 = 0; p0 < k; p0 += kDepth) {
          v8 acc[kRows][kVecs] = {};
          for (i64 p = p0; p < std::min(k, p0 + kDepth); ++p) {
            v8 bv[kVecs];
            for (int q = 0; q < kVecs; ++q) bv[q] = load(b + p * ldb + j0 + 8 * q);
            for (int r = 0; r < kRows; ++r) {
              const v8 av = splat(a[(i0 + r) * lda + p]);
              for (int q = 0; q < kVecs; ++q) acc[r][q] += av * bv[q];
            }
          }
          for (int r = 0; r < kRows; ++r)
            for (int q = 0; q < kVecs; ++q)
              for (int l = 0; l < 8; ++l) total[r][8 * q + l] += acc[r][q][l];
        }
        for (int r = 0; r < kRows; ++r)
          for (int j = 0; j < kCols; ++j) put(&c[(i0 + r) * ldc + j0 + j], total[r][j], alpha, beta);
        continue;
      }
      // An edge tile: the same sums per element (one multiply-add per k, the same blocks).
      for (i64 i = i0; i < std::min(m, i0 + kRows); ++i)
        for (i64 j = j0; j < std::min(n, j0 + kCols); ++j) {
          double total = 0;
          for (i64 p0 = 0; p0 < k; p0 += kDepth) {
            v8 acc = {};
            for (i64 p = p0; p < std::min(k, p0 + kDepth); ++p) acc += splat(a[i * lda + p]) * splat(b[p * ldb + j]);
            total += acc[0];
          }
          put(&c[i * ldc + j], total, alpha, beta);
        }
    }
}

// The sum of a v8's lanes in a fixed tree.
float lanes(v8 v) { return ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7])); }

// C (m x n) from A (m x k) and B^T, B stored (n x k): each element a dot product of two rows.
void gemm_nt(i64 m, i64 n, i64 k, float alpha, const float* a, i64 lda, const float* b, i64 ldb, float beta,
             float* c, i64 ldc) {
  const i64 k8 = k - k % 8;
  // Element (i, j): per block of kDepth, lane l sums p = l, l + 8, ... and the lanes are added;
  // the blocks' sums add up in double; then the tail below 8.
  const auto dot = [&](const float* x, const float* y) {
    double total = 0;
    for (i64 p0 = 0; p0 < k8; p0 += kDepth) {
      v8 acc = {};
      for (i64 p = p0; p < std::min(k8, p0 + kDepth); p += 8) acc += load(x + p) * load(y + p);
      total += lanes(acc);
    }
    float tail = 0;
    for (i64 p = k8; p < k; ++p) tail += x[p] * y[p];
    return total + tail;
  };
  const i64 pairs_i = (m + 1) / 2, pairs_j = (n + 1) / 2;
#pragma omp parallel for collapse(2) schedule(static)
  for (i64 pi = 0; pi < pairs_i; ++pi)
    for (i64 pj = 0; pj < pairs_j; ++pj) {
      const i64 i = 2 * pi, j = 2 * pj;
      if (i + 1 < m && j + 1 < n) {  // 2 x 2 elements at once: four independent chains per lane
        const float *x0 = a + i * lda, *x1 = x0 + lda, *y0 = b + j * ldb, *y1 = y0 + ldb;
        double t00 = 0, t01 = 0, t10 = 0, t11 = 0;
        for (i64 p0 = 0; p0 < k8; p0 += kDepth) {
          v8 s00 = {}, s01 = {}, s10 = {}, s11 = {};
          for (i64 p = p0; p < std::min(k8, p0 + kDepth); p += 8) {
            const v8 a0 = load(x0 + p), a1 = load(x1 + p), b0 = load(y0 + p), b1 = load(y1 + p);
            s00 += a0 * b0, s01 += a0 * b1, s10 += a1 * b0, s11 += a1 * b1;
          }
          t00 += lanes(s00), t01 += lanes(s01), t10 += lanes(s10), t11 += lanes(s11);
        }
        float u00 = 0, u01 = 0, u10 = 0, u11 = 0;  // the tail, as dot() sums it
        for (i64 p = k8; p < k; ++p)
          u00 += x0[p] * y0[p], u01 += x0[p] * y1[p], u10 += x1[p] * y0[p], u11 += x1[p] * y1[p];
        put(&c[i * ldc + j], t00 + u00, alpha, beta), put(&c[i * ldc + j + 1], t01 + u01, alpha, beta);
        put(&c[(i + 1) * ldc + j], t10 + u10, alpha, beta), put(&c[(i + 1) * ldc + j + 1], t11 + u11, alpha, beta);
        continue;
      }
      for (i64 ii = i; ii < std::min(m, i + 2); ++ii)
        for (i64 jj = j; jj < std::min(n, j + 2); ++jj)
          put(&c[ii * ldc + jj], dot(a + ii * lda, b + jj * ldb), alpha, beta);
    }
}

}  // namespace

void cpu_sgemm_ordered(Transpose ta, Transpose tb, i64 m, i64 n, i64 k, float alpha, const float* a, i64 lda,
                       const float* b, i64 ldb, float beta, float* c, i64 ldc) {
  if (m == 0 || n == 0) return;
  std::vector<float> at;
  if (ta == Transpose::Yes) {  // A stored (k x m): copy it to (m x k)
    at.resize(m * k);
    for (i64 p = 0; p < k; ++p)
      for (i64 i = 0; i < m; ++i) at[i * k + p] = a[p * lda + i];
    a = at.data(), lda = k;
  }
  if (tb == Transpose::Yes)
    gemm_nt(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  else
    gemm_nn(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace dit
