// The VAE on the backend. vae_ops: the image primitives (conv2d with asymmetric padding and
// strides, overwriting or accumulating, GroupNorm with and without SiLU, nearest 2x upsampling) on
// every backend against loops in double, and their refusals. vae_golden: the tiny kl-f8-style
// AutoencoderKL of tests/data/vae_tiny* against diffusers' own float64 outputs (encoder moments,
// decode, named intermediate activations), in diffusers' and in latent-diffusion naming.
// vae_file: what a bad VAE file or config gets. Tolerances: the project's rule (relative L2 per tensor against
// float64: fp32 1e-4, bf16/fp16 2e-2).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/arena.h"
#include "core/error.h"
#include "core/philox.h"
#include "io/h5.h"
#include "io/json.h"
#include "io/vae_weights.h"
#include "layers/vae.h"
#include "run/vae_decode.h"
#include "backend_params.h"
#include "backend_suite.h"
#include "io_test_util.h"
#include "zero_vae.h"
#include "reference_ops.h"
#include "value_checks.h"

namespace dit {

namespace {

namespace fs = std::filesystem;
using ref::i64;
using ref::Vec;

const std::string kData = DIT_TEST_DATA;
const std::string kGolden = kData + "/vae_tiny_golden.h5";
const std::string kWeights = kData + "/vae_tiny.safetensors";
const std::string kWeightsLdm = kData + "/vae_tiny_ldm.safetensors";

using io_test::error_of;
using io_test::read_all;

// ---- references in double ------------------------------------------------------------------
Vec conv_ref(const Vec& x, const Vec& w, const Vec& b, i64 n, i64 c, i64 h, i64 wd, i64 k, i64 kh, i64 kw,
             const ConvGeometry& g, i64* oh_out, i64* ow_out) {
  const i64 oh = (h + g.pad_top + g.pad_bottom - kh) / g.stride_h + 1;
  const i64 ow = (wd + g.pad_left + g.pad_right - kw) / g.stride_w + 1;
  Vec y(n * k * oh * ow);
  for (i64 in = 0; in < n; ++in)
    for (i64 ik = 0; ik < k; ++ik)
      for (i64 oy = 0; oy < oh; ++oy)
        for (i64 ox = 0; ox < ow; ++ox) {
          double s = b.empty() ? 0.0 : b[ik];
          for (i64 ic = 0; ic < c; ++ic)
            for (i64 a = 0; a < kh; ++a)
              for (i64 bb = 0; bb < kw; ++bb) {
                const i64 iy = oy * g.stride_h - g.pad_top + a, ix = ox * g.stride_w - g.pad_left + bb;
                if (iy < 0 || iy >= h || ix < 0 || ix >= wd) continue;
                s += x[((in * c + ic) * h + iy) * wd + ix] * w[((ik * c + ic) * kh + a) * kw + bb];
              }
          y[((in * k + ik) * oh + oy) * ow + ox] = s;
        }
  *oh_out = oh;
  *ow_out = ow;
  return y;
}

Vec group_norm_ref(const Vec& x, const Vec& gamma, const Vec& beta, i64 n, i64 c, i64 len, int groups, double eps,
                   bool silu) {
  Vec y(x.size());
  const i64 per = c / groups, count = per * len;
  for (i64 u = 0; u < n * groups; ++u) {
    double m = 0, v = 0;
    for (i64 i = 0; i < count; ++i) m += x[u * count + i];
    m /= count;
    for (i64 i = 0; i < count; ++i) v += (x[u * count + i] - m) * (x[u * count + i] - m);
    v /= count;
    for (i64 i = 0; i < count; ++i) {
      const i64 ch = (u % groups) * per + i / len;
      double o = (x[u * count + i] - m) / std::sqrt(v + eps) * gamma[ch] + beta[ch];
      if (silu) o = o / (1.0 + std::exp(-o));
      y[u * count + i] = o;
    }
  }
  return y;
}

// ---- the primitives on every backend ------------------------------------------------------
class vae_ops : public BackendSuite {
 protected:
  vae_ops() : BackendSuite(0x7ae) {}
  void check_conv(i64 n, i64 c, i64 h, i64 w, i64 k, i64 kh, i64 kw, const ConvGeometry& g, bool bias,
                  const std::string& what) {
    Vec x, wt, b;
    Tensor tx = input(Shape{n, c, h, w}, &x), tw = input(Shape{k, c, kh, kw}, &wt, 0.3);
    Tensor tb = bias ? input(Shape{k}, &b) : Tensor{};
    i64 oh = 0, ow = 0;
    const Vec want = conv_ref(x, wt, b, n, c, h, w, k, kh, kw, g, &oh, &ow);
    Tensor ty = poisoned(Shape{n, k, oh, ow});
    be().conv2d_fwd(tx, tw, tb, g, ty, Accumulate::Overwrite);
    check_values(what, download(ty), want, tol());
    Vec y0;  // Accumulate::Add: y0 + conv
    Tensor ta = input(Shape{n, k, oh, ow}, &y0);
    be().conv2d_fwd(tx, tw, tb, g, ta, Accumulate::Add);
    Vec sum(want.size());
    for (std::size_t i = 0; i < sum.size(); ++i) sum[i] = y0[i] + want[i];
    check_values(what + " accumulated", download(ta), sum, tol());
  }
};

TEST_P(vae_ops, Conv2dMatchesLoopsInDouble) {
  check_conv(2, 5, 9, 9, 7, 3, 3, ConvGeometry::same(1), true, "conv 3x3 pad 1");
  check_conv(2, 5, 9, 9, 7, 3, 3, ConvGeometry{2, 2, 0, 1, 0, 1}, true, "conv 3x3 stride 2 pad (0,1,0,1)");
  check_conv(2, 6, 5, 7, 4, 1, 1, ConvGeometry::same(0), true, "conv 1x1");
  check_conv(1, 3, 6, 8, 5, 3, 2, ConvGeometry{1, 2, 2, 0, 1, 1}, false, "conv 3x2 no bias, mixed stride/pad");
}

TEST_P(vae_ops, GroupNormWithAndWithoutSilu) {
  for (bool silu : {false, true}) {
    Vec x, gm, bt;
    Tensor tx = input(Shape{2, 12, 5, 7}, &x, 2.0, 0.5), tg = input(Shape{12}, &gm, 0.2, 1.0),
           tb = input(Shape{12}, &bt, 0.2);
    Tensor ty = poisoned(Shape{2, 12, 5, 7});
    be().group_norm_fwd(tx, 4, tg, tb, 1e-6f, silu, ty);
    check_values(silu ? "group norm + SiLU" : "group norm", download(ty),
                 group_norm_ref(x, gm, bt, 2, 12, 35, 4, 1e-6, silu), tol());
    be().group_norm_fwd(tx, 4, tg, tb, 1e-6f, silu, tx);  // in place
    check_values(silu ? "group norm + SiLU in place" : "group norm in place", download(tx),
                 group_norm_ref(x, gm, bt, 2, 12, 35, 4, 1e-6, silu), tol());
  }
}

TEST_P(vae_ops, UpsampleRepeatsEachPixel) {
  Vec x;
  Tensor tx = input(Shape{2, 3, 4, 5}, &x);
  Tensor ty = poisoned(Shape{2, 3, 8, 10});
  be().upsample_nearest2x(tx, ty);
  Vec want(2 * 3 * 8 * 10);
  for (i64 p = 0; p < 6; ++p)
    for (i64 i = 0; i < 8; ++i)
      for (i64 j = 0; j < 10; ++j) want[(p * 8 + i) * 10 + j] = x[(p * 4 + i / 2) * 5 + j / 2];
  const std::vector<float> got = download(ty);
  for (std::size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], static_cast<float>(want[i])) << "element " << i;
}

TEST_P(vae_ops, BadShapesAreRefusedNamingThem) {
  Vec h;
  Tensor x = input(Shape{1, 4, 6, 6}, &h), w = input(Shape{3, 5, 3, 3}, &h), y = poisoned(Shape{1, 3, 6, 6});
  EXPECT_NE(error_of([&] { be().conv2d_fwd(x, w, Tensor{}, ConvGeometry::same(1), y, Accumulate::Overwrite); }).find("x(1, 4, 6, 6) w(3, 5, 3, 3)"),
            std::string::npos);
  Tensor w4 = input(Shape{3, 4, 3, 3}, &h), y5 = poisoned(Shape{1, 3, 5, 5});
  EXPECT_NE(error_of([&] { be().conv2d_fwd(x, w4, Tensor{}, ConvGeometry::same(1), y5, Accumulate::Overwrite); }).find("y must be (1, 3, 6, 6)"),
            std::string::npos);
  Tensor g = input(Shape{4}, &h);
  EXPECT_NE(error_of([&] { be().group_norm_fwd(x, 3, g, g, 1e-6f, false, x); }).find("groups dividing C"),
            std::string::npos);
  EXPECT_NE(error_of([&] { be().upsample_nearest2x(x, poisoned(Shape{1, 4, 12, 11})); }).find("(N, C, 2H, 2W)"),
            std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Backends, vae_ops, all_backends(), backend_test_name);

// ---- the tiny VAE against diffusers ---------------------------------------------------------
class vae_golden : public vae_ops {
 protected:
  Tensor upload(const h5::Array& a) {
    std::vector<float> v(a.values.begin(), a.values.end());
    Tensor t = arena_->tensor(a.shape, be_->compute_dtype());
    be_->copy(t, Tensor{v.data(), DType::F32, a.shape, Device::Host});
    return t;
  }
};

TEST_P(vae_golden, EncoderDecoderAndActivationsMatchDiffusers) {
  const h5::File g = h5::File::open_read(kGolden);
  const VaeFile file = open_vae(kWeights);
  EXPECT_EQ(file.config.norm_num_groups, g.attr_int("/config", "norm_num_groups"));
  EXPECT_EQ(file.naming, VaeNaming::Diffusers);
  EXPECT_FALSE(file.config_path.empty()) << "vae_tiny_config.json beside the weights is read";
  Vae vae(*be_, file.config, file.source());
  std::map<std::string, std::vector<float>> seen;
  vae.on_activation = [&](const std::string& name, const Tensor& t) { seen[name] = download(t); };

  const h5::Array image = g.read("/input/image");
  const h5::Array moments = g.read("/encoder/moments");
  Tensor m = arena_->tensor(moments.shape, be_->compute_dtype());
  vae.encode(upload(image), m);
  check_values("encoder moments", download(m), moments.values, tol());

  const h5::Array latent = g.read("/decoder/latent");
  const h5::Array out = g.read("/decoder/output");
  Tensor img = arena_->tensor(out.shape, be_->compute_dtype());
  vae.decode(upload(latent), img);
  check_values("decoder output", download(img), out.values, tol());

  // The intermediate activations: encoding /activations/image (not square, so a swapped height
  // and width shows) and decoding /activations/latent.
  seen.clear();
  const h5::Array small = g.read("/activations/image"), small_latent = g.read("/activations/latent");
  const std::int64_t f = file.config.downsampling();
  Tensor sm = arena_->tensor(Shape{small.shape[0], 2 * file.config.latent_channels, small.shape[2] / f, small.shape[3] / f},
                             be_->compute_dtype());
  vae.encode(upload(small), sm);
  Tensor simg = arena_->tensor(Shape{small_latent.shape[0], file.config.out_channels, small_latent.shape[2] * f,
                                     small_latent.shape[3] * f},
                               be_->compute_dtype());
  vae.decode(upload(small_latent), simg);
  int checked = 0;
  for (const std::string& name : g.members("/activations")) {
    auto it = seen.find(name);
    if (it == seen.end()) continue;
    check_values(name, it->second, g.read("/activations/" + name).values, tol());
    ++checked;
  }
  EXPECT_GE(checked, 10) << "the golden file's intermediate activations were not compared";
}

TEST_P(vae_golden, LatentDiffusionNamingGivesIdenticalMoments) {
  const h5::File g = h5::File::open_read(kGolden);
  const VaeFile a = open_vae(kWeights), b = open_vae(kWeightsLdm, kData + "/vae_tiny_config.json");
  EXPECT_EQ(b.naming, VaeNaming::Ldm);
  EXPECT_EQ(a.config.block_out_channels, b.config.block_out_channels);
  const h5::Array image = g.read("/input/image");
  const h5::Array moments = g.read("/encoder/moments");
  std::vector<float> got[2];
  for (int i = 0; i < 2; ++i) {
    Vae vae(*be_, i == 0 ? a.config : b.config, i == 0 ? a.source() : b.source());
    Tensor m = arena_->tensor(moments.shape, be_->compute_dtype());
    vae.encode(upload(image), m);
    got[i] = download(m);
  }
  ASSERT_EQ(got[0].size(), got[1].size());
  EXPECT_EQ(std::memcmp(got[0].data(), got[1].data(), got[0].size() * sizeof(float)), 0)
      << "the same weights under latent-diffusion names encode differently";
}

// Every backend and storage precision. The golden's weights and inputs hold bf16 values, so a 16-bit
// run holds exactly what the float64 reference ran, and the error is its own arithmetic's: bf16
// storage lands 7.8e-3 (moments) and 1.7e-2 (decode) from diffusers in float64, against 2e-2.
INSTANTIATE_TEST_SUITE_P(Backends, vae_golden, all_backends(), backend_test_name);

// ---- bad files ---------------------------------------------------------------------------------
// A private folder with a copy of the tiny VAE's files, removed at scope exit.
struct VaeCopy {
  fs::path dir;
  VaeCopy() {
    dir = fs::temp_directory_path() / ("dit_vae_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    fs::copy_file(kWeights, dir / "vae.safetensors", fs::copy_options::overwrite_existing);
  }
  ~VaeCopy() { fs::remove_all(dir); }
  std::string weights() const { return (dir / "vae.safetensors").string(); }
  void config(const std::string& json) const { std::ofstream(dir / "config.json") << json; }
};

TEST(vae_file, ArchitectureFromShapesWithoutConfig) {
  VaeCopy c;  // no config.json: the shapes give everything but the groups (32, which 16 channels refuse)
  const std::string e = error_of([&] { open_vae(c.weights()); });
  EXPECT_NE(e.find("architecture read from its shapes, 32 norm groups"), std::string::npos) << e;
  EXPECT_NE(e.find("multiple of norm_num_groups = 32"), std::string::npos) << e;
}

// Without config.json the shapes give every size but two, which are assumed (32 norm groups and
// scaling_factor 0.18215): the VAE's line says so (issue 52). A diffusers-named VAE of 32-wide blocks
// (which 32 groups fit), its tensors written here as zeros.
TEST(vae_file, AssumedGroupsAndScaleAreSaid) {
  VaeCopy c;
  VaeConfig cfg;
  cfg.block_out_channels = {32, 32};
  cfg.layers_per_block = 1;
  io_test::write_zero_vae(c.weights(), cfg);
  const VaeFile f = open_vae(c.weights());
  EXPECT_TRUE(f.config_path.empty());
  EXPECT_EQ(f.config.norm_num_groups, 32);
  EXPECT_DOUBLE_EQ(f.scaling_factor, 0.18215);
  const std::string line = f.describe();
  EXPECT_NE(line.find("architecture from the tensor shapes; assumed: 32 norm groups and scaling_factor 0.18215"),
            std::string::npos) << line;
  c.config(R"({"block_out_channels": [32, 32], "layers_per_block": 1, "norm_num_groups": 32})");
  const std::string read = open_vae(c.weights()).describe();  // with a config.json nothing is assumed
  EXPECT_EQ(read.find("assumed"), std::string::npos) << read;
}

// A key given twice in config.json keeps its last value, as Python's json.load (and so diffusers)
// reads it (issue 53): a scaling_factor of 9 first, the file's 0.18215 after it.
TEST(vae_file, DuplicateKeyKeepsTheLastValue) {
  VaeCopy c;
  const std::string json = read_all(kData + "/vae_tiny_config.json");
  ASSERT_EQ(json.find('{'), 0u);
  ASSERT_NE(json.find("\"scaling_factor\": 0.18215"), std::string::npos);
  c.config("{\"scaling_factor\": 9.0, \"layers_per_block\": 7," + json.substr(1));
  const VaeFile f = open_vae(c.weights());
  EXPECT_DOUBLE_EQ(f.scaling_factor, 0.18215);
  EXPECT_EQ(f.config.layers_per_block, 2);
  const Json doc = parse_json(R"({"a": 1, "b": 2, "a": 3})", "test", "", 4);
  ASSERT_NE(doc.find("a"), nullptr);
  EXPECT_EQ(doc.find("a")->text, "3");
}

TEST(vae_file, ConfigThatDisagreesWithTheWeightsIsNamed) {
  VaeCopy c;
  std::string json = read_all(kData + "/vae_tiny_config.json");
  const std::string from = "\"layers_per_block\": 2";
  ASSERT_NE(json.find(from), std::string::npos) << "vae_tiny_config.json lists layers_per_block: 2";
  c.config(json.replace(json.find(from), from.size(), "\"layers_per_block\": 3"));
  const std::string e = error_of([&] { open_vae(c.weights()); });
  EXPECT_NE(e.find("no tensor encoder.down_blocks.0.resnets.2"), std::string::npos) << e;
  json = read_all(kData + "/vae_tiny_config.json");  // the second block 48 wide: the tensors hold 32
  const std::string second = "32\n  ]";
  ASSERT_NE(json.find(second), std::string::npos);
  c.config(json.replace(json.find(second), second.size(), "48\n  ]"));
  const std::string shape = error_of([&] { open_vae(c.weights()); });
  EXPECT_NE(shape.find("encoder.down_blocks.1.resnets.0.conv1.weight has shape (32, 16, 3, 3)"), std::string::npos)
      << shape;
  c.config("{\"_class_name\": \"UNet2DConditionModel\"}");
  EXPECT_NE(error_of([&] { open_vae(c.weights()); }).find("_class_name is 'UNet2DConditionModel'"), std::string::npos);
  c.config("{\"norm_num_groups\": 8, \"act_fn\": \"gelu\"}");
  EXPECT_NE(error_of([&] { open_vae(c.weights()); }).find("act_fn is 'gelu'"), std::string::npos);
  c.config("{\"norm_num_groups\": 8, \"block_out_channels\": [16, 1e9]}");
  EXPECT_NE(error_of([&] { open_vae(c.weights()); }).find("block_out_channels must be a positive integer"),
            std::string::npos);
  c.config("{\"norm_num_groups\": 8,");
  EXPECT_NE(error_of([&] { open_vae(c.weights()); }).find("is not valid JSON"), std::string::npos);
}

// Every number config.json gives the latents' map is checked where it is read, the key named: a
// scale of 0 or below (it would become the dataset's latent_scale), an infinite or non-numeric shift,
// means that are not finite, standard deviations that are not > 0 (issue 52).
TEST(vae_file, ConfigNumbersOutOfRangeAreNamed) {
  VaeCopy c;
  const std::string good = read_all(kData + "/vae_tiny_config.json");
  auto with = [&](const std::string& from, const std::string& to) {
    std::string json = good;
    const std::size_t at = json.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    c.config(json.replace(at, from.size(), to));
    return error_of([&] { open_vae(c.weights()); });
  };
  const std::string scale = "\"scaling_factor\": 0.18215", shift = "\"shift_factor\": null";
  const std::string mean = "\"latents_mean\": null", stdev = "\"latents_std\": null";
  struct Case {
    std::string from, to, expected;
  };
  const Case cases[] = {
      {scale, "\"scaling_factor\": 0", "scaling_factor must be a number > 0 (latents are multiplied by it), got '0'"},
      {scale, "\"scaling_factor\": -0.5", "scaling_factor must be a number > 0"},
      {scale, "\"scaling_factor\": 1e999", "scaling_factor must be a finite number, got '1e999'"},
      {scale, "\"scaling_factor\": \"0.18\"", "scaling_factor must be a finite number"},
      {shift, "\"shift_factor\": -1e999", "shift_factor must be a finite number, got '-1e999'"},
      {shift, "\"shift_factor\": \"none\"", "shift_factor must be a finite number, got 'none'"},
      {mean, "\"latents_mean\": [0, 0, 1e999, 0], \"latents_std\": [1, 1, 1, 1]",
       "latents_mean must be a finite number, got '1e999'"},
      {stdev, "\"latents_std\": [1, 0, 1, 1], \"latents_mean\": [0, 0, 0, 0]",
       "latents_std holds 0; expected finite numbers > 0"},
      {stdev, "\"latents_std\": [1, -2, 1, 1], \"latents_mean\": [0, 0, 0, 0]", "latents_std holds -2"},
  };
  for (const Case& k : cases) {
    std::string json = good;
    if (k.from == mean) json.replace(json.find(stdev), stdev.size(), "\"unused\": null");
    if (k.from == stdev) json.replace(json.find(mean), mean.size(), "\"unused\": null");
    const std::size_t at = json.find(k.from);
    ASSERT_NE(at, std::string::npos) << k.from;
    c.config(json.replace(at, k.from.size(), k.to));
    const std::string e = error_of([&] { open_vae(c.weights()); });
    EXPECT_NE(e.find(k.expected), std::string::npos) << k.to << ": " << e;
    EXPECT_NE(e.find("config.json"), std::string::npos) << e;
  }
  EXPECT_EQ(with(scale, "\"scaling_factor\": 0.5"), "") << "a positive scale opens";
  EXPECT_EQ(with(shift, "\"shift_factor\": 0.1"), "") << "a finite shift opens";
}

// The safetensors reader's refusals as a VAE file meets them: each one line naming the file.
TEST(vae_file, DamagedSafetensorsAreRefused) {
  VaeCopy c;
  const std::string good = read_all(c.weights());
  auto rewrite = [&](const std::string& bytes) { std::ofstream(c.weights(), std::ios::binary) << bytes; };
  std::uint64_t n = 0;
  std::memcpy(&n, good.data(), 8);
  const std::string header = good.substr(8, n);

  rewrite(good.substr(0, 8 + n / 2));  // truncated header
  EXPECT_NE(error_of([&] { open_vae(c.weights()); }).find(c.weights()), std::string::npos);

  rewrite(good.substr(0, good.size() - 4));  // the last tensor's data ends past the file
  std::string e = error_of([&] { open_vae(c.weights()); });
  EXPECT_NE(e.find(c.weights()), std::string::npos) << e;
  EXPECT_FALSE(e.empty());

  std::string h = header;  // a dtype dit_mp does not read as weights
  const std::size_t at = h.find("\"F32\"");
  ASSERT_NE(at, std::string::npos);
  h.replace(at, 5, "\"I32\"");
  rewrite(good.substr(0, 8) + h + good.substr(8 + n));
  c.config(read_all(kData + "/vae_tiny_config.json"));
  e = error_of([&] {
    const VaeFile f = open_vae(c.weights());
    auto be = make_backend("cpu");
    Vae v(*be, f.config, f.source());
  });
  EXPECT_NE(e.find(c.weights()), std::string::npos) << e;
}

TEST(vae_file, MissingTensorIsNamedWithBothNames) {
  VaeCopy c;
  c.config(read_all(kData + "/vae_tiny_config.json"));
  std::string good = read_all(c.weights());
  std::uint64_t n = 0;
  std::memcpy(&n, good.data(), 8);
  std::string h = good.substr(8, n);
  const std::string name = "\"decoder.up_blocks.1.resnets.2.conv2.bias\"";
  const std::size_t at = h.find(name);
  ASSERT_NE(at, std::string::npos);
  h.replace(at, name.size(), "\"decoder.up_blocks.1.resnets.2.conv2.bia5\"");
  std::ofstream(c.weights(), std::ios::binary) << good.substr(0, 8) << h << good.substr(8 + n);
  const std::string e = error_of([&] { open_vae(c.weights()); });
  EXPECT_NE(e.find("decoder.up_blocks.1.resnets.2.conv2.bias"), std::string::npos) << e;
  EXPECT_NE(e.find(c.weights()), std::string::npos) << e;
}

// ---- decoding memory ---------------------------------------------------------------------------
TEST(vae_memory, DecodeIsPlannedAndBatchesShrinkToFit) {
  const VaeConfig sd;  // kl-f8: 83.65M parameters
  std::int64_t params = 0;
  for (const VaeParam& p : vae_parameters(sd)) params += p.numel();
  EXPECT_EQ(params, 83653863) << "the kl-f8 architecture's parameter count";
  const std::size_t one = vae_decode_bytes(sd, DType::F32, 1, 32, 32), two = vae_decode_bytes(sd, DType::F32, 2, 32, 32);
  EXPECT_GT(one, static_cast<std::size_t>(params) * 4) << "the parameters are counted";
  EXPECT_GT(two, one) << "activations grow with the batch";
  EXPECT_LT(vae_decode_bytes(sd, DType::BF16, 1, 32, 32), one);
  std::printf("    kl-f8 decode of 32x32x4 latents, fp32: %.0f MiB for 1, %.0f MiB for 2\n", one / 1048576.0,
              two / 1048576.0);
  const double three = static_cast<double>(vae_decode_bytes(sd, DType::F32, 4, 32, 32)) - 1;
  EXPECT_EQ(decode_batch(sd, 32, 32, 8, 1e15, "plenty"), 8);
  EXPECT_EQ(decode_batch(sd, 32, 32, 8, three, "a little"), 2);
  const std::string e = error_of([&] { decode_batch(sd, 32, 32, 8, static_cast<double>(one) - 1, "2 GiB free"); });
  EXPECT_NE(e.find("decoding one latent of (4, 32, 32) needs"), std::string::npos) << e;
  EXPECT_NE(e.find("more than 2 GiB free"), std::string::npos) << e;
}

}  // namespace

}  // namespace dit
