// The CUDA backend's attention paths, cuDNN's fused SDPA, the composed attention and the plain
// kernels, against each other and against the double-precision reference of reference_ops.h, in
// bf16 and fp16, at the head dims DiT uses (64 and 72) and an odd token count. Each result comes from the path it is
// named after: the path is forced per backend (CudaBackend::set_attention_path), and forcing
// cuDNN turns a fallback into an error. Without a GPU every test skips and says why.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "backend/backend.h"
#include "core/arena.h"
#include "core/philox.h"
#include "not_served.h"
#include "reference_ops.h"
#include "value_checks.h"

#ifdef DIT_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cudnn_attention.h"
#endif

namespace dit {
namespace {

using ref::AttnShape;
using ref::i64;
using ref::Vec;

constexpr std::uint64_t kSeed = 0xa77e5d0ull;

double tolerance(DType t) { return ref::tolerance(t); }


Vec to_double(const std::vector<float>& v) { return Vec(v.begin(), v.end()); }

enum class Path { Kernel, Cudnn, Composed, Auto };

// Parameters: compute dtype and head dim E; N = 2, T = 37 (not a multiple of any tile), H = 3.
class CudaAttention : public ::testing::TestWithParam<std::tuple<DType, i64>> {
 protected:
  void SetUp() override {
    std::string why;
    if (!backend_available("cuda", &why)) GTEST_SKIP() << "no CUDA backend here: " << why;
#ifdef DIT_HAVE_CUDA
    auto be = std::make_unique<CudaBackend>(dtype());
    cuda_ = be.get();
    backend_ = std::move(be);
    arena_ = std::make_unique<Arena>(*backend_);
#endif
  }

  DType dtype() const { return std::get<0>(GetParam()); }
  AttnShape shape() const { return AttnShape{2, 37, 3, std::get<1>(GetParam())}; }
  double tol() const { return tolerance(dtype()); }
  Backend& be() { return *backend_; }

  void use(Path p) {
#ifdef DIT_HAVE_CUDA
    cuda_->set_attention_path(p == Path::Kernel     ? AttentionPath::Kernel
                              : p == Path::Cudnn    ? AttentionPath::Cudnn
                              : p == Path::Composed ? AttentionPath::Composed
                                                    : AttentionPath::Auto);
#else
    (void)p;
#endif
  }

  // Runs fn with cuDNN forced. False, with cuDNN's message in *why, when cuDNN declined the
  // problem on this GPU and cuDNN version (a refusal: its coverage, reported as not served); any
  // other error propagates and fails the test (not_served.h).
  template <typename Fn>
  bool on_cudnn(Fn&& fn, std::string* why) {
    use(Path::Cudnn);
    return served(fn, why);
  }

  Tensor poisoned(Shape s, DType t) {
    Tensor x = arena_->tensor(s, t);
    be().fill(x, NAN);
    return x;
  }
  std::vector<float> download(const Tensor& t) {
    std::vector<float> h(static_cast<std::size_t>(t.numel()));
    be().copy(Tensor{h.data(), DType::F32, t.shape, Device::Host}, t);
    be().synchronize();
    return h;
  }
  // A random tensor of the compute dtype; *held gets the values it holds after rounding, so the
  // reference sees the same inputs.
  Tensor input(Shape s, Vec* held, double stddev) {
    Philox rng(kSeed, RngPurpose::Test, 0, stream_++);
    std::vector<float> v(static_cast<std::size_t>(s.numel()));
    for (float& x : v) x = static_cast<float>(stddev * rng.normal());
    Tensor x = arena_->tensor(s, dtype());
    be().copy(x, Tensor{v.data(), DType::F32, s, Device::Host});
    be().synchronize();
    *held = to_double(download(x));
    return x;
  }

  struct Fwd {
    Tensor out, lse;
  };
  Fwd forward(Path p, const Tensor& qkv) {
    const AttnShape s = shape();
    use(p);
    Fwd f{poisoned({s.n, s.t, s.h * s.e}, dtype()), poisoned({s.n, s.h, s.t}, DType::F32)};
    be().attention_fwd(qkv, static_cast<int>(s.h), f.out, f.lse);
    return f;
  }
  Tensor backward(Path p, const Tensor& qkv, const Fwd& f, const Tensor& dout) {
    const AttnShape s = shape();
    use(p);
    Tensor dqkv = poisoned({s.n, s.t, s.width()}, dtype());
    be().attention_bwd(qkv, f.out, f.lse, dout, static_cast<int>(s.h), dqkv);
    return dqkv;
  }

  std::string name(const char* what) const {
    return std::string(dtype_name(dtype())) + " E" + std::to_string(shape().e) + " " + what;
  }
  // Only kernels whose results do not vary run to run (train.deterministic).
  void deterministic() { be().set_deterministic(true); }

 private:
  std::unique_ptr<Backend> backend_;
#ifdef DIT_HAVE_CUDA
  CudaBackend* cuda_ = nullptr;
#endif
  std::unique_ptr<Arena> arena_;
  std::uint64_t stream_ = 0;
};

// Forward and backward on each path, and each backward from the other path's forward (the lse
// conventions must agree, as the two paths may serve the directions of one problem).
TEST_P(CudaAttention, CudnnMatchesKernelsAndReference) {
  const AttnShape s = shape();
  Vec qkv_h, dout_h;
  const Tensor qkv = input({s.n, s.t, s.width()}, &qkv_h, 1.5);
  const Tensor dout = input({s.n, s.t, s.h * s.e}, &dout_h, 1.0);
  const ref::AttnOut want = ref::attention_fwd(qkv_h, s);
  const Vec want_d = ref::attention_bwd(qkv_h, dout_h, s);

  const Fwd kf = forward(Path::Kernel, qkv);
  const std::vector<float> k_out = download(kf.out), k_lse = download(kf.lse);
  check_values(name("kernel out"), k_out, want.out, tol());
  check_values(name("kernel lse"), k_lse, want.lse, tol());
  const std::vector<float> k_d = download(backward(Path::Kernel, qkv, kf, dout));
  check_qkv_blocks(name("kernel backward"), k_d, want_d, s, tol());

  std::string why;
  Fwd cf;
  if (!on_cudnn([&] { cf = forward(Path::Cudnn, qkv); }, &why)) GTEST_SKIP() << why;
  const std::vector<float> c_out = download(cf.out), c_lse = download(cf.lse);
  check_values(name("cudnn out"), c_out, want.out, tol());
  check_values(name("cudnn lse"), c_lse, want.lse, tol());
  check_values(name("cudnn out vs kernel out"), c_out, to_double(k_out), tol());
  check_values(name("cudnn lse vs kernel lse"), c_lse, to_double(k_lse), tol());
  check_qkv_blocks(name("kernel backward from cudnn forward"),
            download(backward(Path::Kernel, qkv, cf, dout)), want_d, s, tol());
  // The likely mix where cuDNN's backward does not serve: its forward, the composed backward.
  check_qkv_blocks(name("composed backward from cudnn forward"),
            download(backward(Path::Composed, qkv, cf, dout)), want_d, s, tol());

  Tensor cd;
  if (!on_cudnn([&] { cd = backward(Path::Cudnn, qkv, cf, dout); }, &why))
    GTEST_SKIP() << "the cuDNN forward passed; its backward: " << why;
  const std::vector<float> c_d = download(cd);
  check_qkv_blocks(name("cudnn backward"), c_d, want_d, s, tol());
  check_qkv_blocks(name("cudnn backward vs kernel backward"), c_d, to_double(k_d), s, tol());
  check_qkv_blocks(name("cudnn backward from kernel forward"),
            download(backward(Path::Cudnn, qkv, kf, dout)), want_d, s, tol());
  // Under train.deterministic only deterministic engines are planned: the same call gives the
  // same bits (by default the fastest backward may sum with atomics).
  deterministic();
  Tensor d1, d2;
  if (!on_cudnn([&] { d1 = backward(Path::Cudnn, qkv, cf, dout); }, &why))
    GTEST_SKIP() << why << " (a deterministic backward engine)";
  const std::vector<float> first = download(d1);
  d2 = backward(Path::Cudnn, qkv, cf, dout);
  const std::vector<float> again = download(d2);
  check_qkv_blocks(name("deterministic cudnn backward"), first, want_d, s, tol());
  EXPECT_EQ(std::memcmp(again.data(), first.data(), first.size() * sizeof(float)), 0)
      << name("deterministic cudnn backward differs between two identical calls");
}

// Whatever path Auto (the default) picks, cuDNN or the composed attention after one line on
// stderr, the results are right, and stay right when the cached decision is reused.
TEST_P(CudaAttention, AutoPathMatchesReference) {
  const AttnShape s = shape();
  Vec qkv_h, dout_h;
  const Tensor qkv = input({s.n, s.t, s.width()}, &qkv_h, 1.5);
  const Tensor dout = input({s.n, s.t, s.h * s.e}, &dout_h, 1.0);
  const ref::AttnOut want = ref::attention_fwd(qkv_h, s);
  for (int call = 0; call < 2; ++call) {
    const Fwd f = forward(Path::Auto, qkv);
    check_values(name("auto out"), download(f.out), want.out, tol());
    check_values(name("auto lse"), download(f.lse), want.lse, tol());
    check_qkv_blocks(name("auto backward"), download(backward(Path::Auto, qkv, f, dout)),
              ref::attention_bwd(qkv_h, dout_h, s), s, tol());
  }
}

// Forcing cuDNN on a problem it cannot take (E not a multiple of 8, one token) is a refusal naming
// the reason, raised before any output is written; the kernels and the composed attention still take it.
TEST_P(CudaAttention, ForcedCudnnRefusesWhatItCannotTake) {
  const AttnShape s{1, 5, 2, 12};
  Vec qkv_h;
  const Tensor qkv = input({s.n, s.t, s.width()}, &qkv_h, 1.0);
  const Tensor out = poisoned({s.n, s.t, s.h * s.e}, dtype());
  const Tensor lse = poisoned({s.n, s.h, s.t}, DType::F32);
  use(Path::Cudnn);
  try {
    be().attention_fwd(qkv, static_cast<int>(s.h), out, lse);
    ADD_FAILURE() << "DIT_ATTENTION=cudnn accepted E = 12";
  } catch (const FusedRefusal& e) {
    EXPECT_EQ(e.kind(), FusedFailure::Ineligible) << e.what();
    EXPECT_NE(std::strstr(e.what(), "DIT_ATTENTION=cudnn"), nullptr) << e.what();
    EXPECT_NE(std::strstr(e.what(), "multiple of 8"), nullptr) << e.what();
  }
  const AttnShape one{1, 1, 2, 64};
  Vec qkv1_h;
  const Tensor qkv1 = input({one.n, one.t, one.width()}, &qkv1_h, 1.0);
  const Tensor out1 = poisoned({one.n, one.t, one.h * one.e}, dtype());
  const Tensor lse1 = poisoned({one.n, one.h, one.t}, DType::F32);
  use(Path::Cudnn);
  try {
    be().attention_fwd(qkv1, static_cast<int>(one.h), out1, lse1);
    ADD_FAILURE() << "DIT_ATTENTION=cudnn accepted one token";
  } catch (const FusedRefusal& e) {
    EXPECT_NE(std::strstr(e.what(), "one token"), nullptr) << e.what();
  }
  for (Path p : {Path::Kernel, Path::Composed, Path::Auto}) {
    use(p);
    be().fill(out, NAN);
    be().attention_fwd(qkv, static_cast<int>(s.h), out, lse);
    check_values(std::string(dtype_name(dtype())) + " E12 out, path " + std::to_string(int(p)),
                 download(out), ref::attention_fwd(qkv_h, s).out, tol());
  }
}

// Each cuDNN stage made to fail (DIT_CUDNN_FAIL, read when a backend is made): under auto the
// problem runs on the composed attention with the right numbers and the note names the stage;
// forced (DIT_ATTENTION=cudnn) the same failure is an error.
TEST_P(CudaAttention, InjectedCudnnFailuresFallBackOrFailWhenForced) {
#ifdef DIT_HAVE_CUDA
  // Five fresh backends, each planning anew: one shape is enough, and keeps the stage short.
  if (dtype() != DType::BF16 || shape().e != 64) GTEST_SKIP() << "run at bf16 E64 only";
  const AttnShape s = shape();
  Vec qkv_h, dout_h;
  const Tensor qkv = input({s.n, s.t, s.width()}, &qkv_h, 1.5);
  const Tensor dout = input({s.n, s.t, s.h * s.e}, &dout_h, 1.0);
  const ref::AttnOut want = ref::attention_fwd(qkv_h, s);
  const Vec want_d = ref::attention_bwd(qkv_h, dout_h, s);
  for (const char* kind : {"library", "graph", "no engine", "plan", "execute"}) {
    setenv("DIT_CUDNN_FAIL", kind, 1);
    CudaBackend be2(dtype());
    unsetenv("DIT_CUDNN_FAIL");
    be2.set_attention_path(AttentionPath::Auto);
    Arena arena(be2);
    const Tensor out = arena.tensor({s.n, s.t, s.h * s.e}, dtype());
    const Tensor lse = arena.tensor({s.n, s.h, s.t}, DType::F32);
    const Tensor dqkv = arena.tensor({s.n, s.t, s.width()}, dtype());
    be2.attention_fwd(qkv, static_cast<int>(s.h), out, lse);
    be2.attention_bwd(qkv, out, lse, dout, static_cast<int>(s.h), dqkv);
    std::vector<float> o(out.numel()), d(dqkv.numel());
    be2.copy(Tensor{o.data(), DType::F32, out.shape, Device::Host}, out);
    be2.copy(Tensor{d.data(), DType::F32, dqkv.shape, Device::Host}, dqkv);
    check_values(name("out after injected ") + kind, o, want.out, tol());
    check_qkv_blocks(name("backward after injected ") + kind, d, want_d, s, tol());
    // ("plan" fires only where the heuristics offer a config; without one it is "no engine")
    const std::string note = be2.attention_note();
    EXPECT_TRUE(note.find(kind) != std::string::npos ||
                (std::string(kind) == "plan" && note.find("no engine") != std::string::npos))
        << note;
    // Forced: a build stage's failure is a refusal (not served), an execution failure an error.
    be2.set_attention_path(AttentionPath::Cudnn);
    if (std::string(kind) == "execute") {
      try {
        be2.attention_fwd(qkv, static_cast<int>(s.h), out, lse);
        ADD_FAILURE() << "DIT_ATTENTION=cudnn ran after an injected execute failure";
      } catch (const FusedRefusal& e) {
        ADD_FAILURE() << "an execute failure was reported as a refusal: " << e.what();
      } catch (const Error&) {
      }
    } else {
      EXPECT_THROW(be2.attention_fwd(qkv, static_cast<int>(s.h), out, lse), FusedRefusal) << kind;
    }
  }
#endif
}

INSTANTIATE_TEST_SUITE_P(Paths, CudaAttention,
                         ::testing::Combine(::testing::Values(DType::BF16, DType::F16),
                                            ::testing::Values(i64{64}, i64{72})),
                         [](const ::testing::TestParamInfo<std::tuple<DType, i64>>& param) {
                           return std::string(dtype_name(std::get<0>(param.param))) + "_E" +
                                  std::to_string(std::get<1>(param.param));
                         });

}  // namespace
}  // namespace dit
