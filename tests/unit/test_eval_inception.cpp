// The Inception-V3 FID path (issue 14): its resize, pooling and concatenation (the CPU backend's
// primitives, as the network calls them) against PyTorch's numbers, the .npz
// reader of reference statistics (tests/data/npz, made by make_npz_cases.py) with its errors, and,
// in InceptionReference.*, the whole network and FID against a PyTorch computation made at test
// time by tools/inception_reference.py (the ctest fixture eval.inception.reference_data).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include "backend/backend.h"
#include "core/error.h"
#include "eval/inception.h"
#include "io/h5.h"
#include "io/npz.h"
#include "reference_ops.h"

namespace dit::eval {
namespace {

const std::string kNpz = std::string(DIT_TEST_DATA) + "/npz/";

// Runs `f`, expects a dit::Error whose message contains every one of `parts`.
template <typename F>
void expect_error(F&& f, std::initializer_list<std::string> parts) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing '" << *parts.begin() << "'";
  } catch (const Error& e) {
    const std::string what = e.what();
    for (const std::string& p : parts) EXPECT_NE(what.find(p), std::string::npos) << "'" << p << "' not in: " << what;
  }
}

// A host fp32 tensor over v (the CPU backend's primitives work on host memory).
Tensor host(std::vector<float>& v, Shape s) {
  v.resize(std::size_t(s.numel()));
  return Tensor{v.data(), DType::F32, s, Device::Host};
}

TEST(InceptionOps, ResizeMatchesPytorchBilinear) {
  // F.interpolate(..., mode="bilinear", align_corners=False) on these inputs, printed by PyTorch.
  const std::unique_ptr<Backend> be = make_backend("cpu");
  std::vector<float> x = {0, 1, 2, 3}, up;
  be->resize_bilinear(host(x, Shape{1, 1, 2, 2}), host(up, Shape{1, 1, 4, 4}));
  const std::vector<float> want_up = {0, 0.25f, 0.75f, 1, 0.5f, 0.75f, 1.25f, 1.5f,
                                      1.5f, 1.75f, 2.25f, 2.5f, 2, 2.25f, 2.75f, 3};
  for (std::size_t i = 0; i < want_up.size(); ++i) EXPECT_NEAR(up[i], want_up[i], 1e-6) << i;
  std::vector<float> y(15), down;
  for (int i = 0; i < 15; ++i) y[std::size_t(i)] = float(i);
  be->resize_bilinear(host(y, Shape{1, 1, 3, 5}), host(down, Shape{1, 1, 2, 3}));
  const std::vector<float> want_down = {1.5833333f, 3.25f, 4.9166667f, 9.0833333f, 10.75f, 12.416667f};
  for (std::size_t i = 0; i < want_down.size(); ++i) EXPECT_NEAR(down[i], want_down[i], 1e-5) << i;
}

TEST(InceptionOps, PoolsExcludeThePadding) {
  const std::unique_ptr<Backend> be = make_backend("cpu");
  const PoolGeometry same = PoolGeometry::square(3, 1, 1);
  std::vector<float> x(9), avg, mx;
  for (int i = 0; i < 9; ++i) x[std::size_t(i)] = float(i);
  be->pool2d_fwd(host(x, Shape{1, 1, 3, 3}), same, PoolKind::AverageExcludingPadding, host(avg, Shape{1, 1, 3, 3}));
  const std::vector<float> want = {2, 2.5f, 3, 3.5f, 4, 4.5f, 5, 5.5f, 6};  // PyTorch, count_include_pad=False
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_FLOAT_EQ(avg[i], want[i]) << i;
  for (float& v : x) v = -1.f - v;  // all negative: a zero pad would win the maximum
  be->pool2d_fwd(host(x, Shape{1, 1, 3, 3}), same, PoolKind::Max, host(mx, Shape{1, 1, 3, 3}));
  EXPECT_FLOAT_EQ(mx[0], -1.f);  // max of -1, -2, -4, -5
  EXPECT_FLOAT_EQ(mx[8], -5.f);  // max of -5, -6, -8, -9
}

TEST(InceptionOps, ConcatStacksChannelsPerImage) {
  const std::unique_ptr<Backend> be = make_backend("cpu");
  std::vector<float> a = {1, 2, 3, 4}, b = {5, 6, 7, 8, 9, 10, 11, 12}, c;
  const Tensor tc = host(c, Shape{2, 3, 1, 2});
  be->copy_channels(host(a, Shape{2, 1, 1, 2}), tc, 0);
  be->copy_channels(host(b, Shape{2, 2, 1, 2}), tc, 1);
  EXPECT_EQ(tc.dim(1), 3);
  EXPECT_EQ(c, (std::vector<float>{1, 2, 5, 6, 7, 8, 3, 4, 9, 10, 11, 12}));
}

TEST(InceptionOps, ConvolutionTableHasTheFidNetworkShape) {
  const auto& specs = inception_conv_specs();
  EXPECT_EQ(specs.size(), 94u);
  std::set<std::string> names;
  std::int64_t params = 0;
  for (const auto& s : specs) names.insert(s.name), params += std::int64_t(s.k) * (s.c * s.kh * s.kw + 4);
  EXPECT_EQ(names.size(), specs.size());
  // torchvision's Inception3 has 27,161,264 parameters; without the auxiliary head (3,326,696)
  // and fc (2,049,000), 21,785,568 (conv weights, BatchNorm gamma and beta), plus the running
  // mean and variance of its 17,216 BatchNorm channels: the 4 per output channel counted here.
  EXPECT_EQ(params, 27161264 - 3326696 - 2049000 + 2 * 17216);
}

// mu[i] = 0.5 i - 1.25, sigma[i][j] = 10 (i + 1) + j + 0.5, as make_npz_cases.py writes them.
void expect_small_stats(const Gaussian& g) {
  ASSERT_EQ(g.f, 4);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(g.mu[std::size_t(i)], 0.5 * i - 1.25);
    for (int j = 0; j < 4; ++j) EXPECT_EQ(g.sigma[std::size_t(i * 4 + j)], 10.0 * (i + 1) + j + 0.5) << i << "," << j;
  }
}

TEST(ReferenceNpz, ReadsStoredDeflatedFortranAndBigEndianArrays) {
  expect_small_stats(load_reference_npz(kNpz + "stored_f8.npz", 4));
  expect_small_stats(load_reference_npz(kNpz + "deflated_f4.npz", 4));
  expect_small_stats(load_reference_npz(kNpz + "fortran_big_endian.npz", 4));
  EXPECT_EQ(npz::keys(kNpz + "stored_f8.npz"), (std::vector<std::string>{"mu", "sigma"}));
}

TEST(ReferenceNpz, BadFilesGetOneLineNamingFileAndArray) {
  expect_error([] { load_reference_npz(kNpz + "missing_sigma.npz", 4); },
               {"missing_sigma.npz", "no array 'sigma'", "holds: mu"});
  expect_error([] { load_reference_npz(kNpz + "wrong_shape.npz", 4); },
               {"wrong_shape.npz", "'sigma' has shape (4, 3), expected (4, 4)"});
  expect_error([] { load_reference_npz(kNpz + "stored_f8.npz"); }, {"'mu' has shape (4,), expected (2048,)"});
  expect_error([] { load_reference_npz(kNpz + "integer_sigma.npz", 4); }, {"'sigma'", "<i8", "float32 or float64"});
  expect_error([] { load_reference_npz(kNpz + "nan_sigma.npz", 4); },
               {"nan_sigma.npz", "'sigma' holds NaN or Inf at [2, 1]"});
  expect_error([] { load_reference_npz(kNpz + "nope.npz", 4); }, {"nope.npz", "cannot open"});
  expect_error([] { load_reference_npz(std::string(DIT_TEST_DATA) + "/dit_tiny_golden.h5", 4); },
               {"dit_tiny_golden.h5", "not a .npz"});
}

TEST(ReferenceNpz, TruncatedOrFlippedFilesAreRefused) {
  std::ifstream in(kNpz + "deflated_f4.npz", std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string dir = testing::TempDir();
  auto write = [&](const std::string& name, const std::string& content) {
    std::ofstream(dir + name, std::ios::binary) << content;
    return dir + name;
  };
  for (std::size_t keep : {bytes.size() / 2, bytes.size() - 30, std::size_t(10)})
    expect_error([&] { load_reference_npz(write("cut.npz", bytes.substr(0, keep)), 4); }, {"cut.npz"});
  // A flipped byte inside sigma's deflated data: inflate fails or the CRC-32 does not match.
  std::string flipped = bytes;
  const std::size_t sigma_at = bytes.find("sigma.npy");
  ASSERT_NE(sigma_at, std::string::npos);
  flipped[sigma_at + 9 + 40] ^= 0x5a;
  expect_error([&] { load_reference_npz(write("flipped.npz", flipped), 4); }, {"flipped.npz", "'sigma'", "damaged"});
}

// ---- the network against PyTorch ----------------------------------------------------------------

// The fixture folder of tools/inception_reference.py, or empty with the reason to skip.
std::string reference_dir(std::string& why) {
  const char* dir = std::getenv("DIT_INCEPTION_REF");
  if (!dir) {
    why = "DIT_INCEPTION_REF is unset; run through ctest -R eval.inception (its fixture makes the data)";
    return "";
  }
  std::ifstream skipped(std::string(dir) + "/SKIPPED");
  if (skipped) {
    std::getline(skipped, why);
    why = "the reference data was not made: " + why;
    return "";
  }
  return dir;
}

std::vector<float> as_floats(const h5::Array& a) { return std::vector<float>(a.values.begin(), a.values.end()); }

TEST(InceptionReference, FeaturesAndFidMatchPytorch) {
  std::string why;
  const std::string dir = reference_dir(why);
  if (dir.empty()) GTEST_SKIP() << why;
  using Clock = std::chrono::steady_clock;
  const auto seconds_since = [](Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  };
  const auto t0 = Clock::now();
  const InceptionV3 net = InceptionV3::load(dir + "/inception_random.h5");
  const h5::File ref = h5::File::open_read(dir + "/reference.h5");
  const h5::Array xa = ref.read("/images_a"), xb = ref.read("/images_b");
  const h5::Array fa = ref.read("/features_a"), fb = ref.read("/features_b");
  const int n = int(xa.shape[0]);
  ASSERT_GE(n, 2);
  const double load_s = seconds_since(t0);
  const auto t1 = Clock::now();
  const Features ga = net.features(as_floats(xa).data(), n, 3, int(xa.shape[2]), int(xa.shape[3]), 5);
  // Set b through the one-call entry of the evaluate command (grey images, repeated to RGB).
  const Features gb = inception_features(dir + "/inception_random.h5", as_floats(xb), int(xb.shape[0]), 1,
                                         int(xb.shape[2]), int(xb.shape[3]));
  const double features_s = seconds_since(t1);
  const auto t2 = Clock::now();
  const double err_a = ref::rel_l2(ga.data, fa.values), err_b = ref::rel_l2(gb.data, fb.values);
  double rms = 0;
  for (double v : fa.values) rms += v * v;
  EXPECT_GT(rms, 1e-3 * double(fa.values.size()));  // the features carry signal
  EXPECT_LE(err_a, 1e-4);
  EXPECT_LE(err_b, 1e-4);

  // FID of set b (features computed here) against set a's statistics from the .npz.
  const Gaussian ref_a = load_reference_npz(dir + "/stats_a.npz");
  const double fid = frechet_distance(fit_gaussian(gb), ref_a), want = ref.attr_double("/", "fid");
  EXPECT_GT(want, 0);
  EXPECT_LE(std::abs(fid - want), 1e-3 * want);
  // The float32, deflated copy holds the same statistics rounded to float.
  const Gaussian ref_a32 = load_reference_npz(dir + "/stats_a_compressed.npz");
  for (std::size_t i = 0; i < ref_a.sigma.size(); ++i)
    ASSERT_EQ(ref_a32.sigma[i], double(float(ref_a.sigma[i]))) << "sigma flat index " << i;
  std::printf("Inception-V3 vs PyTorch: %d + %d images, features rel L2 %.3g (a) %.3g (b); FID %.9g vs %.9g "
              "(rel %.3g); seconds: load %.1f, features %.1f, FID %.1f\n",
              n, int(xb.shape[0]), err_a, err_b, fid, want, std::abs(fid - want) / want, load_s, features_s,
              seconds_since(t2));
}

TEST(InceptionReference, BadWeightFilesNameTheTensor) {
  std::string why;
  const std::string dir = reference_dir(why);
  if (dir.empty()) GTEST_SKIP() << why;
  expect_error([&] { InceptionV3::load(dir + "/bad_shape.h5"); },
               {"bad_shape.h5", "Conv2d_1a_3x3.conv.weight", "has shape (32, 3, 3, 2), expected (32, 3, 3, 3)"});
  expect_error([&] { InceptionV3::load(dir + "/missing_tensor.h5"); },
               {"missing_tensor.h5", "Conv2d_1a_3x3.bn.running_var", "missing"});
  expect_error([&] { InceptionV3::load(dir + "/reference.h5"); }, {"reference.h5", "convert_inception.py"});
}

}  // namespace
}  // namespace dit::eval
