// Backend conformance: every primitive of dit::Backend against the double-precision reference in
// reference_ops.h, and the backward primitives against central finite differences. The suite is
// parameterized by backend name; data moves only through Backend::copy from and to host fp32, so it
// runs unchanged on device memory and in bf16 with the tolerance of the backend's compute dtype.
#include <gtest/gtest.h>

#include <bit>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "backend/backend.h"
#include "core/arena.h"
#include "core/philox.h"
#include "backend_params.h"
#include "reference_ops.h"
#include "value_checks.h"

namespace dit {
namespace {

using ref::i64;
using ref::Vec;

constexpr std::uint64_t kSeed = 0x5eed0fd17ull;

Vec to_double(const std::vector<float>& v) { return Vec(v.begin(), v.end()); }
std::vector<float> to_float(const Vec& v) { return std::vector<float>(v.begin(), v.end()); }

// Bitwise-exact comparison for pure data movement and integer-valued arithmetic.
void check_exact(const std::string& what, const std::vector<float>& got, const Vec& want) {
  ASSERT_EQ(got.size(), want.size()) << what;
  std::size_t mismatches = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (!(static_cast<double>(got[i]) == want[i]) && mismatches++ < 3)
      ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", expected " << want[i];
  EXPECT_EQ(mismatches, 0u) << what;
  std::printf("    %-44s exact (%zu mismatches)\n", what.c_str(), mismatches);
}

// A double-precision reference backward against central differences of the double forward, so
// the oracle itself is checked and not only assumed.
void check_reference_grad(const std::string& what, const Vec& analytic, const Vec& fd) {
  const double err = ref::rel_l2(analytic, fd);
  std::printf("    %-44s rel L2 %.2e  (tol %.0e)\n", what.c_str(), err, ref::kFiniteDiffTol);
  EXPECT_LE(err, ref::kFiniteDiffTol) << what;
}

class BackendOps : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::string why;
    if (!backend_available(GetParam(), &why))
      GTEST_SKIP() << "backend '" << GetParam() << "' is not available: " << why;
    backend_ = make_backend(GetParam());
    arena_ = std::make_unique<Arena>(*backend_);
  }

  Backend& be() { return *backend_; }
  DType dt() const { return backend_->compute_dtype(); }
  double tol() const { return ref::tolerance(dt()); }

  Tensor alloc(Shape s, DType t) { return arena_->tensor(s, t); }
  Tensor alloc(Shape s) { return alloc(s, dt()); }
  // A backend tensor filled with NaN, so an output element the op does not write shows.
  Tensor poisoned(Shape s, DType t) {
    Tensor x = alloc(s, t);
    be().fill(x, NAN);
    return x;
  }
  Tensor poisoned(Shape s) { return poisoned(s, dt()); }

  std::vector<float> download(const Tensor& t) {
    std::vector<float> h(static_cast<std::size_t>(t.numel()));
    be().copy(Tensor{h.data(), DType::F32, t.shape, Device::Host}, t);
    be().synchronize();
    return h;
  }
  // A backend tensor of dtype t holding v; *held gets the values it holds after the conversion
  // (the references are computed from those, so bf16 input rounding is not counted as op error).
  Tensor upload(Shape s, std::vector<float> v, DType t, Vec* held = nullptr) {
    Tensor x = alloc(s, t);
    be().copy(x, Tensor{v.data(), DType::F32, s, Device::Host});
    be().synchronize();
    if (held) *held = to_double(download(x));
    return x;
  }
  Tensor upload(Shape s, const Vec& v, Vec* held = nullptr) {
    return upload(s, to_float(v), dt(), held);
  }
  Tensor upload_ids(std::vector<std::int32_t> ids) {
    const Shape s{static_cast<i64>(ids.size())};
    Tensor x = alloc(s, DType::I32);
    be().copy(x, Tensor{ids.data(), DType::I32, s, Device::Host});
    be().synchronize();
    return x;
  }

  // Normal random numbers from a fresh Philox stream (one per tensor of a test).
  Vec normals(i64 n, double stddev = 1.0, double mean = 0.0) {
    Philox rng(kSeed, RngPurpose::Test, 0, stream_++);
    Vec v(n);
    for (auto& x : v) x = static_cast<float>(mean + stddev * rng.normal());  // exact in fp32
    return v;
  }
  // Integers uniform in [-r, r].
  Vec integers(i64 n, int r) {
    Philox rng(kSeed, RngPurpose::Test, 0, stream_++);
    Vec v(n);
    for (auto& x : v) x = static_cast<double>(rng.below(2 * r + 1)) - r;
    return v;
  }
  // A random input of the compute dtype; *held as in upload().
  Tensor input(Shape s, Vec* held, double stddev = 1.0, double mean = 0.0) {
    return upload(s, normals(s.numel(), stddev, mean), held);
  }

  void expect_close(const std::string& what, const Tensor& got, const Vec& want, double tol) {
    check_values(what, download(got), want, tol);
  }

  // A (N, K*D) gradient tensor for ops that overwrite only some chunks: random everywhere except
  // NaN in the chunks `targets`. Returns the tensor; *held as in upload().
  Tensor chunk_output(const ref::Tokens& g, i64 k, std::vector<int> targets, Vec* held) {
    Vec v = normals(g.n * k * g.d);
    for (int c : targets) ref::put_chunk(v, Vec(g.n * g.d, NAN), g.n, k, g.d, c);
    return upload({g.n, k * g.d}, v, held);
  }
  // Checks the chunks `want` (index, reference) of such a tensor and that every other chunk kept
  // its value.
  void expect_chunks(const std::string& what, const Tensor& dmod, const Vec& before,
                     const ref::Tokens& g, i64 k, const std::vector<std::pair<int, Vec>>& want,
                     double tol) {
    const Vec got = to_double(download(dmod));
    for (int c = 0; c < k; ++c) {
      bool target = false;
      for (const auto& [index, values] : want)
        if (index == c) {
          check_values(what + " chunk " + std::to_string(c),
                       to_float(ref::chunk(got, g.n, k, g.d, c)), values, tol);
          target = true;
        }
      if (!target) {
        EXPECT_EQ(ref::chunk(got, g.n, k, g.d, c), ref::chunk(before, g.n, k, g.d, c))
            << what << ": chunk " << c << " was not an output but changed";
      }
    }
  }

 private:
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Arena> arena_;
  std::uint64_t stream_ = 0;
};

// ---- memory --------------------------------------------------------------------------------

TEST_P(BackendOps, CopyMovesDataAndFillWritesEveryElement) {
  Vec held;
  const Vec v = normals(3 * 5 * 7);
  Tensor x = upload({3, 5, 7}, v, &held);
  if (dt() == DType::F32) check_exact("copy host fp32 -> backend fp32", to_float(held), v);
  Tensor y = poisoned({3, 5, 7});
  be().copy(y, x);
  check_exact("copy backend -> backend", download(y), held);
  Tensor z = poisoned({105});  // only numel has to agree
  be().copy(z, x);
  check_exact("copy to another shape of equal numel", download(z), held);

  for (float value : {0.375f, -3.0f}) {
    Tensor f = poisoned({3, 41});
    be().fill(f, value);
    check_exact("fill " + std::to_string(value), download(f), Vec(3 * 41, value));
  }
  Tensor n = alloc({17});
  be().fill(n, NAN);
  for (float e : download(n)) EXPECT_TRUE(std::isnan(e)) << "fill NaN";
}

// fp32 -> bf16 rounds to nearest even, keeps NaN a NaN, and bf16 -> fp32 is exact: on the host,
// over every bf16 value, and around every rounding boundary (halfway points and their neighbours).
TEST_P(BackendOps, CopyConvertsFp32AndBf16WithRoundToNearestEven) {
  std::vector<float> src;
  for (std::uint32_t hi = 0; hi < 0x10000u; ++hi)
    for (std::uint32_t lo : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu}) {
      const std::uint32_t u = hi << 16 | lo;
      float f;
      std::memcpy(&f, &u, 4);
      src.push_back(f);
    }
  const Shape s{static_cast<i64>(src.size())};
  std::vector<std::uint16_t> bits(src.size());
  be().copy(Tensor{bits.data(), DType::BF16, s, Device::Host},
            Tensor{src.data(), DType::F32, s, Device::Host});
  be().synchronize();
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < src.size(); ++i) {
    const bool nan_ok = std::isnan(src[i]) && (bits[i] & 0x7f80u) == 0x7f80u && (bits[i] & 0x7fu);
    if (!nan_ok && bits[i] != ref::bf16_round_nearest_even(src[i]) && wrong++ < 3) {
      ADD_FAILURE() << "fp32 bits " << std::hex << std::bit_cast<std::uint32_t>(src[i])
                    << " -> bf16 " << bits[i] << ", expected "
                    << ref::bf16_round_nearest_even(src[i]);
    }
  }
  EXPECT_EQ(wrong, 0u);

  std::vector<std::uint16_t> all(0x10000);
  for (std::uint32_t b = 0; b < 0x10000u; ++b) all[b] = static_cast<std::uint16_t>(b);
  std::vector<float> wide(all.size());
  be().copy(Tensor{wide.data(), DType::F32, {0x10000}, Device::Host},
            Tensor{all.data(), DType::BF16, {0x10000}, Device::Host});
  be().synchronize();
  for (std::uint32_t b = 0; b < 0x10000u; ++b) {
    const std::uint32_t w = std::bit_cast<std::uint32_t>(wide[b]);
    if ((b & 0x7f80u) == 0x7f80u && (b & 0x7fu))
      EXPECT_TRUE(std::isnan(wide[b])) << b;
    else
      EXPECT_EQ(w, b << 16) << "bf16 " << std::hex << b;
  }

  // Through backend memory: fp32 host -> bf16 backend tensor -> fp32 host.
  const Vec v = normals(1000, 10.0);
  Vec back;
  upload({1000}, to_float(v), DType::BF16, &back);
  Vec want(v.size());
  for (std::size_t i = 0; i < v.size(); ++i)
    want[i] = bf16_bits_to_float(ref::bf16_round_nearest_even(static_cast<float>(v[i])));
  check_exact("copy fp32 host -> bf16 backend -> fp32 host", to_float(back), want);
}

// ---- dense algebra ---------------------------------------------------------------------------

struct GemmCase {
  ref::GemmShape s;
  Transpose ta, tb;
  Accumulate acc;
  float alpha;
  std::string name() const {
    return "gemm " + std::to_string(s.batch) + "x" + std::to_string(s.m) + "x" +
           std::to_string(s.n) + "x" + std::to_string(s.k) + (ta == Transpose::Yes ? " At" : " A") +
           (tb == Transpose::Yes ? "Bt" : "B") + (acc == Accumulate::Add ? " add" : " overwrite") +
           " alpha " + std::to_string(alpha).substr(0, 5);
  }
};

std::vector<GemmCase> gemm_cases(std::vector<ref::GemmShape> shapes,
                                 std::vector<std::pair<Accumulate, float>> modes) {
  std::vector<GemmCase> cases;
  for (const auto& s : shapes)
    for (Transpose ta : {Transpose::No, Transpose::Yes})
      for (Transpose tb : {Transpose::No, Transpose::Yes})
        for (const auto& [acc, alpha] : modes) cases.push_back({s, ta, tb, acc, alpha});
  return cases;
}

// Shapes of A, B and C as stored: 3-D (batch, rows, cols) when `batched`, else 2-D.
struct GemmTensors {
  Shape a, b, c;
};
GemmTensors gemm_shapes(const GemmCase& g, bool batched) {
  const auto& s = g.s;
  const i64 ar = g.ta == Transpose::No ? s.m : s.k, ac = g.ta == Transpose::No ? s.k : s.m;
  const i64 br = g.tb == Transpose::No ? s.k : s.n, bc = g.tb == Transpose::No ? s.n : s.k;
  if (!batched) return {{ar, ac}, {br, bc}, {s.m, s.n}};
  return {{s.batch, ar, ac}, {s.batch, br, bc}, {s.batch, s.m, s.n}};
}

TEST_P(BackendOps, GemmAllTransposesModesAndBatches) {
  const std::vector<std::pair<Accumulate, float>> modes = {
      {Accumulate::Overwrite, 1.f}, {Accumulate::Overwrite, -1.25f}, {Accumulate::Add, 0.5f}};
  for (bool batched : {false, true}) {
    std::vector<ref::GemmShape> shapes = {{batched ? 3 : 1, 7, 5, 12}};
    if (!batched) shapes.push_back({1, 70, 33, 45});
    for (const GemmCase& g : gemm_cases(shapes, modes)) {
      const GemmTensors t = gemm_shapes(g, batched);
      Vec a, b, c0;
      Tensor ta = input(t.a, &a), tb = input(t.b, &b);
      Tensor tc = g.acc == Accumulate::Add ? input(t.c, &c0) : poisoned(t.c);
      be().gemm(ta, g.ta, tb, g.tb, tc, g.acc, g.alpha);
      const Vec want =
          ref::gemm(a, g.ta, b, g.tb, g.s, g.alpha, g.acc == Accumulate::Add ? &c0 : nullptr);
      expect_close(g.name() + (batched ? " (3-D)" : ""), tc, want, tol());
    }
  }
}

// Weight gradients: inputs in the compute dtype, C in fp32 (ParamSet's main grads), accumulated
// over several calls (microbatches) with K = 4096 (a batch of tokens). The reference uses the
// inputs as the backend holds them, so only the output's dtype and the accumulation are judged,
// by the fp32 rule. Rounding C to 16 bits after each call misses it: measured with a bf16 C
// on this test's data, rel L2 3.2e-3 (fp16: 4.6e-4), against 2e-7..4e-7 with the fp32 C.
TEST_P(BackendOps, GemmAccumulatesInFp32OutputFromAnyInputDtype) {
  const ref::GemmShape s{1, 24, 16, 4096};
  const GemmCase g{s, Transpose::Yes, Transpose::No, Accumulate::Add, 1.f};
  const GemmTensors t = gemm_shapes(g, false);
  Vec c = normals(t.c.numel(), 0.01);
  Tensor tc = upload(t.c, to_float(c), DType::F32, &c);
  for (int call = 0; call < 8; ++call) {
    Vec a, b;
    Tensor ta = input(t.a, &a), tb = input(t.b, &b);
    be().gemm(ta, g.ta, tb, g.tb, tc, Accumulate::Add, 1.f);
    c = ref::gemm(a, g.ta, b, g.tb, g.s, 1.f, &c);
  }
  EXPECT_EQ(tc.dtype, DType::F32);
  expect_close("gemm bf16/fp16/fp32 inputs -> fp32 C, K 4096, 8 accumulations", tc, c,
               ref::tolerance(DType::F32));
}

// A linear layer's forward: the product plus one bias value per column of C, for every transpose,
// with the bias aligned (the CUDA backend fuses it into cuBLASLt's epilogue) and misaligned by one
// element (it falls back to a separate pass). Odd sizes: m = 37 rows, n = 24 features, k = 40.
TEST_P(BackendOps, GemmBiasAddsOneValuePerColumn) {
  for (const GemmCase& g : gemm_cases({{1, 37, 24, 40}}, {{Accumulate::Overwrite, 1.f}})) {
    for (i64 bias_offset : {0, 1}) {
      const GemmTensors t = gemm_shapes(g, false);
      Vec a, b, bias_held;
      Tensor ta = input(t.a, &a), tb = input(t.b, &b);
      Tensor bias_store = input({g.s.n + 1}, &bias_held);
      Tensor bias = bias_store.rows(bias_offset, g.s.n);
      const Vec bias_v(bias_held.begin() + bias_offset, bias_held.begin() + bias_offset + g.s.n);
      Tensor tc = poisoned(t.c);
      be().gemm_bias(ta, g.ta, tb, g.tb, bias, tc);
      const Vec want = ref::add_rowwise(ref::gemm(a, g.ta, b, g.tb, g.s, 1.f, nullptr), bias_v);
      expect_close(g.name() + " + bias" + (bias_offset ? " (bias misaligned)" : ""), tc, want, tol());
    }
  }
}

// Small integers make every product and partial sum exact in fp32 and bf16 (|C| <= 219 < 256),
// so any correct GEMM, whatever its summation order, must match bit for bit.
TEST_P(BackendOps, GemmWithIntegerInputsIsExact) {
  for (const GemmCase& g :
       gemm_cases({{3, 7, 5, 12}}, {{Accumulate::Overwrite, 1.f}, {Accumulate::Add, 2.f}})) {
    const GemmTensors t = gemm_shapes(g, true);
    Vec a, b, c0;
    Tensor ta = upload(t.a, integers(t.a.numel(), 3), &a);
    Tensor tb = upload(t.b, integers(t.b.numel(), 3), &b);
    Tensor tc =
        g.acc == Accumulate::Add ? upload(t.c, integers(t.c.numel(), 3), &c0) : poisoned(t.c);
    be().gemm(ta, g.ta, tb, g.tb, tc, g.acc, g.alpha);
    check_exact(
        g.name() + " integers", download(tc),
        ref::gemm(a, g.ta, b, g.tb, g.s, g.alpha, g.acc == Accumulate::Add ? &c0 : nullptr));
  }
}

TEST_P(BackendOps, AddRowwiseBroadcastsOverRows) {
  const i64 n = 3, t = 5, d = 12;
  Vec y0, bias, pos;
  Tensor y = input({n, t, d}, &y0);
  Tensor vb = input({d}, &bias), vp = input({t, d}, &pos);
  be().add_rowwise(y, vb);
  expect_close("add_rowwise bias (D)", y, ref::add_rowwise(y0, bias), tol());
  be().add_rowwise(y.view({n, t * d}), vp.view({t * d}));
  expect_close("add_rowwise pos_embed (T*D)", y, ref::add_rowwise(ref::add_rowwise(y0, bias), pos),
               tol());
}

TEST_P(BackendOps, SumRowsOverwritesOrAccumulates) {
  const i64 n = 3, t = 5, d = 12;
  Vec x, o0;
  Tensor tx = input({n, t, d}, &x);
  Tensor out = poisoned({d});
  be().sum_rows(tx, out, Accumulate::Overwrite);
  expect_close("sum_rows (15, 12) overwrite", out, ref::sum_rows(x, d), tol());
  Tensor out2 = input({t * d}, &o0);
  be().sum_rows(tx, out2, Accumulate::Add);
  Vec want = ref::sum_rows(x, t * d);
  for (i64 i = 0; i < t * d; ++i) want[i] += o0[i];
  expect_close("sum_rows (3, 60) add", out2, want, tol());
}

TEST_P(BackendOps, Transpose01SwapsLeadingDims) {
  Vec x;
  Tensor src = input({3, 5, 7}, &x);
  Tensor dst = poisoned({5, 3, 7});
  be().transpose_01(src, dst);
  check_exact("transpose_01 (3,5,7) -> (5,3,7)", download(dst), ref::transpose_01(x, 3, 5, 7));
  Tensor back = poisoned({3, 5, 7});
  be().transpose_01(dst, back);
  check_exact("transpose_01 twice", download(back), x);
}

TEST_P(BackendOps, AxpyScaleAndSumSquares) {
  Vec x, y0;
  Tensor tx = input({5, 37}, &x), ty = input({5, 37}, &y0);
  be().axpy(-0.75f, tx, ty);
  Vec want(y0.size());
  for (std::size_t i = 0; i < want.size(); ++i) want[i] = y0[i] - 0.75 * x[i];
  expect_close("axpy alpha -0.75", ty, want, tol());
  const Vec after = to_double(download(ty));
  be().scale(ty, 1.7f);
  for (std::size_t i = 0; i < want.size(); ++i) want[i] = after[i] * static_cast<double>(1.7f);
  expect_close("scale 1.7", ty, want, tol());

  Vec s;
  Tensor ts = input({1237}, &s, 3.0);
  const double got = be().sum_squares(ts), ss = ref::dot(s, s);
  std::printf("    %-44s rel err %.2e  (tol %.0e)\n", "sum_squares (1237)",
              std::fabs(got - ss) / ss, tol());
  EXPECT_LE(std::fabs(got - ss) / ss, tol());
}

// ---- activations ---------------------------------------------------------------------------

TEST_P(BackendOps, GeluTanhForwardAndBackward) {
  const Shape s{3, 5, 12};
  Vec x, dy;
  Tensor tx = input(s, &x, 3.0), tdy = input(s, &dy);
  Tensor y = poisoned(s), dx = poisoned(s);
  be().gelu_tanh_fwd(tx, y);
  expect_close("gelu_tanh_fwd", y, ref::map(x, ref::gelu_tanh), tol());
  be().gelu_tanh_bwd(tx, tdy, dx);
  Vec want = ref::map(x, ref::gelu_tanh_grad);
  for (std::size_t i = 0; i < want.size(); ++i) want[i] *= dy[i];
  expect_close("gelu_tanh_bwd", dx, want, tol());
}

TEST_P(BackendOps, SiluForwardAndBackward) {
  const Shape s{3, 5, 12};
  Vec x, dy, d0;
  Tensor tx = input(s, &x, 3.0), tdy = input(s, &dy);
  Tensor y = poisoned(s), dx = poisoned(s);
  be().silu_fwd(tx, y);
  expect_close("silu_fwd", y, ref::map(x, ref::silu), tol());
  Vec grad = ref::map(x, ref::silu_grad);
  for (std::size_t i = 0; i < grad.size(); ++i) grad[i] *= dy[i];
  be().silu_bwd(tx, tdy, dx, Accumulate::Overwrite);
  expect_close("silu_bwd overwrite", dx, grad, tol());
  Tensor dxa = input(s, &d0);
  be().silu_bwd(tx, tdy, dxa, Accumulate::Add);
  Vec want = grad;
  for (std::size_t i = 0; i < want.size(); ++i) want[i] += d0[i];
  expect_close("silu_bwd add", dxa, want, tol());
  // The timestep embedder calls silu_bwd in place (dx aliases dy).
  be().silu_bwd(tx, tdy, tdy, Accumulate::Overwrite);
  expect_close("silu_bwd in place (dx == dy)", tdy, grad, tol());
}

// Backward of an elementwise op against central differences of L(x) = sum(f(x) * R).
TEST_P(BackendOps, ActivationBackwardMatchesFiniteDifferences) {
  const Shape s{3, 5, 12};
  Vec x, r;
  Tensor tx = input(s, &x, 2.0), tr = input(s, &r);
  auto check = [&](const std::string& name, double (*f)(double), const Tensor& dx) {
    const Vec fd = ref::numeric_grad([&](const Vec& v) { return ref::dot(ref::map(v, f), r); }, x);
    expect_close(name + " vs finite differences", dx, fd, tol());
  };
  Tensor dg = poisoned(s), ds = poisoned(s);
  be().gelu_tanh_bwd(tx, tr, dg);
  check("gelu_tanh_bwd", ref::gelu_tanh, dg);
  be().silu_bwd(tx, tr, ds, Accumulate::Overwrite);
  check("silu_bwd", ref::silu, ds);
  // The references themselves against the same differences.
  Vec rg = ref::map(x, ref::gelu_tanh_grad), rs = ref::map(x, ref::silu_grad);
  for (std::size_t i = 0; i < x.size(); ++i) rg[i] *= r[i], rs[i] *= r[i];
  for (auto [name, f, analytic] : {std::tuple{"ref gelu_tanh_grad", &ref::gelu_tanh, &rg},
                                   std::tuple{"ref silu_grad", &ref::silu, &rs}})
    check_reference_grad(
        std::string(name) + " vs finite differences", *analytic,
        ref::numeric_grad([&](const Vec& v) { return ref::dot(ref::map(v, f), r); }, x));
}

// ---- adaLN ---------------------------------------------------------------------------------

constexpr ref::Tokens kTok{3, 5, 12};
constexpr i64 kChunks = 6;
constexpr float kLnEps = 1e-6f;

TEST_P(BackendOps, LnModulateForward) {
  const ref::Tokens g = kTok;
  Vec x, mod;
  Tensor tx = input({g.n, g.t, g.d}, &x, 2.0, 0.5);
  Tensor tm = input({g.n, kChunks * g.d}, &mod, 0.5);
  Tensor y = poisoned({g.n, g.t, g.d}), mean = poisoned({g.n * g.t}, DType::F32),
         rstd = poisoned({g.n * g.t}, DType::F32);
  be().ln_modulate_fwd(tx, {tm, 3}, {tm, 4}, kLnEps, y, mean, rstd);
  const ref::LnOut want = ref::ln_modulate_fwd(x, g, ref::chunk(mod, g.n, kChunks, g.d, 3),
                                               ref::chunk(mod, g.n, kChunks, g.d, 4), kLnEps);
  expect_close("ln_modulate_fwd y (shift 3, scale 4)", y, want.y, tol());
  expect_close("ln_modulate_fwd mean", mean, want.mean, tol());
  expect_close("ln_modulate_fwd rstd", rstd, want.rstd, tol());
}

// Chunk indices of shift and scale in mod, and of their gradients in dmod.
struct LnBwdCase {
  int shift, scale, dshift, dscale;
  Accumulate acc;
};
// ln_modulate_bwd with the backend's own saved statistics, both ways of writing dx, and gradient
// chunks at other indices than the modulation's (the interface takes each index separately).
TEST_P(BackendOps, LnModulateBackward) {
  const ref::Tokens g = kTok;
  const Shape xs{g.n, g.t, g.d};
  for (const LnBwdCase c :
       {LnBwdCase{3, 4, 3, 4, Accumulate::Overwrite}, LnBwdCase{1, 2, 5, 1, Accumulate::Add}}) {
    Vec x, mod, dy, dx0, before;
    Tensor tx = input(xs, &x, 2.0, 0.5), tm = input({g.n, kChunks * g.d}, &mod, 0.5),
           tdy = input(xs, &dy);
    Tensor y = alloc(xs), mean = alloc({g.n * g.t}, DType::F32),
           rstd = alloc({g.n * g.t}, DType::F32);
    be().ln_modulate_fwd(tx, {tm, c.shift}, {tm, c.scale}, kLnEps, y, mean, rstd);
    Tensor dx = c.acc == Accumulate::Add ? input(xs, &dx0) : poisoned(xs);
    Tensor dmod = chunk_output(g, kChunks, {c.dshift, c.dscale}, &before);
    be().ln_modulate_bwd(tdy, tx, mean, rstd, {tm, c.scale}, dx, c.acc, {dmod, c.dshift},
                         {dmod, c.dscale});
    ref::LnGrads want =
        ref::ln_modulate_bwd(dy, x, g, ref::chunk(mod, g.n, kChunks, g.d, c.scale), kLnEps);
    if (c.acc == Accumulate::Add)
      for (std::size_t i = 0; i < want.dx.size(); ++i) want.dx[i] += dx0[i];
    const std::string name =
        std::string("ln_modulate_bwd ") + (c.acc == Accumulate::Add ? "add" : "overwrite");
    expect_close(name + " dx", dx, want.dx, tol());
    expect_chunks(name + " dmod", dmod, before, g, kChunks,
                  {{c.dshift, want.dshift}, {c.dscale, want.dscale}}, tol());
  }
}

// dx, dshift and dscale of L = sum(y * R) against central differences of the forward.
TEST_P(BackendOps, LnModulateBackwardMatchesFiniteDifferences) {
  const ref::Tokens g = kTok;
  const Shape xs{g.n, g.t, g.d};
  Vec x, mod, r, before;
  Tensor tx = input(xs, &x, 2.0, 0.5), tm = input({g.n, kChunks * g.d}, &mod, 0.5),
         tr = input(xs, &r);
  const Vec shift = ref::chunk(mod, g.n, kChunks, g.d, 3),
            scale = ref::chunk(mod, g.n, kChunks, g.d, 4);
  Tensor y = alloc(xs), mean = alloc({g.n * g.t}, DType::F32),
         rstd = alloc({g.n * g.t}, DType::F32);
  be().ln_modulate_fwd(tx, {tm, 3}, {tm, 4}, kLnEps, y, mean, rstd);
  Tensor dx = poisoned(xs), dmod = chunk_output(g, kChunks, {3, 4}, &before);
  be().ln_modulate_bwd(tr, tx, mean, rstd, {tm, 4}, dx, Accumulate::Overwrite, {dmod, 3},
                       {dmod, 4});

  auto loss = [&](const Vec& xv, const Vec& sh, const Vec& sc) {
    return ref::dot(ref::ln_modulate_fwd(xv, g, sh, sc, kLnEps).y, r);
  };
  const Vec fdx = ref::numeric_grad([&](const Vec& v) { return loss(v, shift, scale); }, x);
  const Vec fdshift = ref::numeric_grad([&](const Vec& v) { return loss(x, v, scale); }, shift);
  const Vec fdscale = ref::numeric_grad([&](const Vec& v) { return loss(x, shift, v); }, scale);
  expect_close("ln_modulate_bwd dx vs finite differences", dx, fdx, tol());
  expect_chunks("ln_modulate_bwd vs finite differences", dmod, before, g, kChunks,
                {{3, fdshift}, {4, fdscale}}, tol());

  const ref::LnGrads rg = ref::ln_modulate_bwd(r, x, g, scale, kLnEps);
  check_reference_grad("ref ln_modulate_bwd dx vs finite differences", rg.dx, fdx);
  check_reference_grad("ref ln_modulate_bwd dshift vs finite differences", rg.dshift, fdshift);
  check_reference_grad("ref ln_modulate_bwd dscale vs finite differences", rg.dscale, fdscale);
}

TEST_P(BackendOps, GateResidualForwardAndBackward) {
  const ref::Tokens g = kTok;
  const Shape xs{g.n, g.t, g.d};
  Vec x0, h, mod, dxv, before;
  Tensor tx = input(xs, &x0), th = input(xs, &h), tm = input({g.n, kChunks * g.d}, &mod);
  const Vec gate = ref::chunk(mod, g.n, kChunks, g.d, 2);
  be().gate_residual_fwd(tx, th, {tm, 2});
  expect_close("gate_residual_fwd (gate chunk 2)", tx, ref::gate_residual_fwd(x0, h, gate, g),
               tol());

  Tensor tdx = input(xs, &dxv), dh = poisoned(xs), dmod = chunk_output(g, kChunks, {5}, &before);
  be().gate_residual_bwd(tdx, th, {tm, 2}, dh, {dmod, 5});
  const ref::GateGrads want = ref::gate_residual_bwd(dxv, h, gate, g);
  expect_close("gate_residual_bwd dh", dh, want.dh, tol());
  expect_chunks("gate_residual_bwd dmod", dmod, before, g, kChunks, {{5, want.dgate}}, tol());
  // Both gradients against differences of L = sum(fwd(x, h, gate) * dx).
  auto loss = [&](const Vec& hv, const Vec& gv) {
    return ref::dot(ref::gate_residual_fwd(x0, hv, gv, g), dxv);
  };
  check_reference_grad("ref gate_residual_bwd dh vs finite differences", want.dh,
                       ref::numeric_grad([&](const Vec& v) { return loss(v, gate); }, h));
  check_reference_grad("ref gate_residual_bwd dgate vs finite differences", want.dgate,
                       ref::numeric_grad([&](const Vec& v) { return loss(h, v); }, gate));
}

// ---- attention -----------------------------------------------------------------------------

std::string attn_name(const char* op, const ref::AttnShape& s) {
  return std::string(op) + " N" + std::to_string(s.n) + " T" + std::to_string(s.t) + " H" +
         std::to_string(s.h) + " E" + std::to_string(s.e);
}

// T = 70 and 130 leave a partial block after the CPU's 64-query blocks; 130 has three blocks;
// 600 has three key blocks of the CPU's 256 (the last partial), so the online softmax merges
// blocks whose row maxima grow.
const ref::AttnShape kAttnShapes[] = {{3, 7, 3, 4}, {2, 70, 3, 5}, {1, 130, 2, 4}, {1, 600, 2, 8}};

TEST_P(BackendOps, AttentionForward) {
  for (const ref::AttnShape& s : kAttnShapes) {
    Vec qkv;
    Tensor tq = input({s.n, s.t, s.width()}, &qkv, 1.5);
    Tensor out = poisoned({s.n, s.t, s.h * s.e}), lse = poisoned({s.n, s.h, s.t}, DType::F32);
    be().attention_fwd(tq, static_cast<int>(s.h), out, lse);
    const ref::AttnOut want = ref::attention_fwd(qkv, s);
    expect_close(attn_name("attention_fwd out", s), out, want.out, tol());
    expect_close(attn_name("attention_fwd lse", s), lse, want.lse, tol());
  }
}


TEST_P(BackendOps, AttentionBackward) {
  for (const ref::AttnShape& s : kAttnShapes) {
    Vec qkv, dout;
    Tensor tq = input({s.n, s.t, s.width()}, &qkv, 1.5), tdo = input({s.n, s.t, s.h * s.e}, &dout);
    Tensor out = alloc({s.n, s.t, s.h * s.e}), lse = alloc({s.n, s.h, s.t}, DType::F32);
    be().attention_fwd(tq, static_cast<int>(s.h), out, lse);
    Tensor dqkv = poisoned({s.n, s.t, s.width()});
    be().attention_bwd(tq, out, lse, tdo, static_cast<int>(s.h), dqkv);
    check_qkv_blocks(attn_name("attention_bwd", s), download(dqkv),
                     ref::attention_bwd(qkv, dout, s), s, tol());
  }
}

TEST_P(BackendOps, AttentionBackwardMatchesFiniteDifferences) {
  const ref::AttnShape s{2, 3, 2, 3};
  Vec qkv, r;
  Tensor tq = input({s.n, s.t, s.width()}, &qkv, 1.5), tr = input({s.n, s.t, s.h * s.e}, &r);
  Tensor out = alloc({s.n, s.t, s.h * s.e}), lse = alloc({s.n, s.h, s.t}, DType::F32);
  be().attention_fwd(tq, static_cast<int>(s.h), out, lse);
  Tensor dqkv = poisoned({s.n, s.t, s.width()});
  be().attention_bwd(tq, out, lse, tr, static_cast<int>(s.h), dqkv);
  const Vec fd = ref::numeric_grad(
      [&](const Vec& v) { return ref::dot(ref::attention_fwd(v, s).out, r); }, qkv);
  check_qkv_blocks("attention_bwd vs finite differences", download(dqkv), fd, s, tol());
  check_reference_grad("ref attention_bwd vs finite differences", ref::attention_bwd(qkv, r, s),
                       fd);
}

// ---- embeddings ----------------------------------------------------------------------------

TEST_P(BackendOps, EmbeddingGathersAndAccumulatesRepeatedIds) {
  const i64 v = 7, d = 12;
  const std::vector<std::int32_t> ids = {3, 0, 6, 3, 3, 1, 6, 0, 5};  // 2 and 4 unused
  const i64 n = static_cast<i64>(ids.size());
  Vec table, dout, dtable0;
  Tensor tt = input({v, d}, &table), tids = upload_ids(ids);
  Tensor out = poisoned({n, d});
  be().embedding_fwd(tt, tids, out);
  check_exact("embedding_fwd", download(out), ref::embedding_fwd(table, ids, d));
  Tensor tdo = input({n, d}, &dout), dt = input({v, d}, &dtable0);
  be().embedding_bwd(tdo, tids, dt);
  expect_close("embedding_bwd (repeated ids, accumulate)", dt,
               ref::embedding_bwd(dout, ids, dtable0, d), tol());
}

TEST_P(BackendOps, TimestepEmbeddingOddAndEvenWidth) {
  const std::vector<float> t = {0.f, 1.f, 17.5f, 500.25f, 999.f};
  Vec th;
  Tensor tt = upload({5}, t, DType::F32, &th);
  for (i64 f : {12, 9}) {
    Tensor out = poisoned({5, f});
    be().timestep_embedding(tt, 10000.f, out);
    const std::vector<float> got = download(out);
    check_values("timestep_embedding F=" + std::to_string(f), got,
                 ref::timestep_embedding(th, 10000.0, f), tol());
    for (i64 n = 0; f % 2 && n < 5; ++n)
      EXPECT_EQ(got[n * f + f - 1], 0.f) << "the padding column of sample " << n;
  }
}

struct PatchCase {
  ref::Image s;
  int p;
};

TEST_P(BackendOps, PatchifyMapsIndicesAndUnpatchifyIsItsInverseAndAdjoint) {
  for (const PatchCase c : {PatchCase{{2, 3, 6, 4}, 2}, PatchCase{{1, 2, 6, 9}, 3}})
    for (PatchOrder order : {PatchOrder::ChannelMajor, PatchOrder::ChannelMinor}) {
      const ref::Image& s = c.s;
      const std::string name = "patchify " + Shape{s.n, s.c, s.h, s.w}.str() + " p" +
                               std::to_string(c.p) +
                               (order == PatchOrder::ChannelMajor ? " (c,i,j)" : " (i,j,c)");
      const Shape is{s.n, s.c, s.h, s.w}, ps{s.n, (s.h / c.p) * (s.w / c.p), s.c * c.p * c.p};
      // Distinct integers (at most 144, exact in bf16) so a misplaced element cannot go unseen.
      Vec x(is.numel());
      for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<double>(i + 1);
      Vec y;
      Tensor tx = upload(is, x), ty = upload(ps, integers(ps.numel(), 4), &y);
      Tensor patches = poisoned(ps), img = poisoned(is), back = poisoned(is);
      be().patchify(tx, c.p, order, patches);
      const std::vector<float> px = download(patches);
      check_exact(name, px, ref::patchify(x, s, c.p, order));
      be().unpatchify(patches, c.p, order, back);
      check_exact(name + " then unpatchify", download(back), x);
      be().unpatchify(ty, c.p, order, img);
      const std::vector<float> uy = download(img);
      check_exact("un" + name, uy, ref::unpatchify(y, s, c.p, order));
      // <patchify(x), y> == <x, unpatchify(y)>, exact with integers.
      EXPECT_EQ(ref::dot(to_double(px), y), ref::dot(x, to_double(uy))) << name << " adjoint";
    }
}

// ---- optimizer -----------------------------------------------------------------------------

// Several AdamW steps against torch.optim.AdamW semantics on fp32 master params and moments.
// Their dtype is fp32 on every backend (only the gradient is in the compute dtype), so the fp32
// tolerance applies to them; the parameter change p - p0 is also checked so that the update, not
// just the unchanged bulk of p, is held to it.
TEST_P(BackendOps, AdamWStepMatchesTorchOverSeveralSteps) {
  const i64 n = 301;
  const float lr = 0.05f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.1f;
  const ref::AdamW rh{lr, b1, b2, eps, wd};
  const double t32 = ref::tolerance(DType::F32);
  Vec p, m(n, 0.0), v(n, 0.0);
  Tensor tp = upload({n}, to_float(normals(n)), DType::F32, &p);
  Tensor tm = upload({n}, to_float(m), DType::F32), tv = upload({n}, to_float(v), DType::F32);
  const Vec p0 = p;
  for (int step = 1; step <= 5; ++step) {
    Vec g;
    Tensor tg = input({n}, &g, 0.1);
    const double bc1 = 1.0 - std::pow(double{b1}, step), bc2 = 1.0 - std::pow(double{b2}, step);
    const math::AdamWParams h{
        lr, b1, b2, eps, wd, static_cast<float>(bc1), static_cast<float>(bc2)};
    be().adamw_step(tp, tg, tm, tv, h);
    ref::adamw_step(p, g, m, v, rh, step);
    const std::string name = "adamw_step " + std::to_string(step);
    expect_close(name + " param", tp, p, t32);
    expect_close(name + " exp_avg", tm, m, t32);
    expect_close(name + " exp_avg_sq", tv, v, t32);
    Vec got = to_double(download(tp)), want = p;
    for (i64 i = 0; i < n; ++i) got[i] -= p0[i], want[i] -= p0[i];
    check_values(name + " param - param0", to_float(got), want, t32);
  }
}

TEST_P(BackendOps, EmaStep) {
  const i64 n = 301;
  Vec e, p;
  Tensor te = upload({n}, to_float(normals(n)), DType::F32, &e);
  for (int step = 0; step < 3; ++step) {
    Tensor tp = upload({n}, to_float(normals(n)), DType::F32, &p);
    be().ema_step(te, tp, 0.9f);
    ref::ema_step(e, p, static_cast<double>(0.9f));
    expect_close("ema_step " + std::to_string(step), te, e, ref::tolerance(DType::F32));
  }
}

// ---- bad input -----------------------------------------------------------------------------

TEST_P(BackendOps, ShapeMismatchesThrow) {
  Tensor a = alloc({7, 12}), b = alloc({11, 5}), c = alloc({7, 5});
  EXPECT_THROW(be().gemm(a, Transpose::No, b, Transpose::No, c, Accumulate::Overwrite), Error);
  EXPECT_THROW(
      be().gemm(a, Transpose::Yes, alloc({12, 5}), Transpose::No, c, Accumulate::Overwrite), Error);
  EXPECT_THROW(be().gemm(alloc({2, 7, 12}), Transpose::No, alloc({3, 12, 5}), Transpose::No,
                         alloc({2, 7, 5}), Accumulate::Overwrite),
               Error);
  EXPECT_THROW(be().patchify(alloc({1, 3, 5, 4}), 2, PatchOrder::ChannelMajor, alloc({1, 6, 12})),
               Error);
  EXPECT_THROW(be().patchify(alloc({1, 3, 6, 4}), 2, PatchOrder::ChannelMajor, alloc({1, 5, 12})),
               Error);
  EXPECT_THROW(be().unpatchify(alloc({1, 6, 12}), 2, PatchOrder::ChannelMinor, alloc({1, 3, 6, 5})),
               Error);
  EXPECT_THROW(be().copy(alloc({5}), alloc({6})), Error);
  EXPECT_THROW(be().sum_rows(alloc({3, 7}), alloc({5}), Accumulate::Overwrite), Error);
  EXPECT_THROW(be().embedding_fwd(alloc({7, 12}), upload_ids({1, 2}), alloc({2, 13})), Error);
  EXPECT_THROW(be().timestep_embedding(alloc({3}, DType::F32), 10000.f, alloc({4, 8})), Error);
  EXPECT_THROW(be().transpose_01(alloc({3, 5, 7}), alloc({3, 5, 7})), Error);
  EXPECT_THROW(be().add_rowwise(alloc({3, 7}), alloc({5})), Error);
  EXPECT_THROW(
      be().attention_fwd(alloc({1, 4, 20}), 3, alloc({1, 4, 6}), alloc({1, 3, 4}, DType::F32)),
      Error);
  Tensor x = alloc({2, 3, 4}), mod = alloc({2, 24});
  EXPECT_THROW(be().ln_modulate_fwd(x, {mod, 6}, {mod, 1}, kLnEps, alloc({2, 3, 4}),
                                    alloc({6}, DType::F32), alloc({6}, DType::F32)),
               Error);
  EXPECT_THROW(be().gate_residual_fwd(x, alloc({2, 3, 4}), {alloc({3, 24}), 2}), Error);
}

INSTANTIATE_TEST_SUITE_P(Backends, BackendOps, all_backends(), backend_test_name);

}  // namespace
}  // namespace dit
