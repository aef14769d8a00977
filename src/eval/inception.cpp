// The FID Inception-V3 (see inception.h): the convolution table, weight loading with BatchNorm
// folding, and the forward pass block by block. Block names, branch names and shapes follow
// torchvision's Inception3, whose names the FID weights use; the FID variant's pooling branches
// are written where they differ (A, C and the first E block average without the padding, the
// last E block max-pools). tools/torch_inception.py is the PyTorch twin that the test compares with.
#include "eval/inception.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/error.h"
#include "eval/conv.h"
#include "eval/inception_ops.h"
#include "io/h5.h"
#include "io/npz.h"
#include "io/sealed_h5.h"

namespace dit::eval {

namespace {

constexpr const char* kFormat = "dit_mp inception-v3 fid";
constexpr std::int64_t kVersion = 1;
constexpr double kBatchNormEps = 1e-3;
constexpr const char* kRemedy =
    "convert the PyTorch state dict with tools/convert_inception.py (see docs/inception.md)";

// ---- the convolution table -------------------------------------------------------------------

struct SpecList {
  std::vector<InceptionConvSpec> v;
  void add(std::string name, int c, int k, int kh, int kw, int stride = 1, int ph = 0, int pw = 0) {
    v.push_back({std::move(name), c, k, kh, kw, stride, ph, pw});
  }
};

void declare_a(SpecList& s, const std::string& p, int c, int pool_features) {  // 35 x 35
  s.add(p + ".branch1x1", c, 64, 1, 1);
  s.add(p + ".branch5x5_1", c, 48, 1, 1);
  s.add(p + ".branch5x5_2", 48, 64, 5, 5, 1, 2, 2);
  s.add(p + ".branch3x3dbl_1", c, 64, 1, 1);
  s.add(p + ".branch3x3dbl_2", 64, 96, 3, 3, 1, 1, 1);
  s.add(p + ".branch3x3dbl_3", 96, 96, 3, 3, 1, 1, 1);
  s.add(p + ".branch_pool", c, pool_features, 1, 1);
}

void declare_b(SpecList& s, const std::string& p, int c) {  // 35 -> 17
  s.add(p + ".branch3x3", c, 384, 3, 3, 2);
  s.add(p + ".branch3x3dbl_1", c, 64, 1, 1);
  s.add(p + ".branch3x3dbl_2", 64, 96, 3, 3, 1, 1, 1);
  s.add(p + ".branch3x3dbl_3", 96, 96, 3, 3, 2);
}

void declare_c(SpecList& s, const std::string& p, int c, int c7) {  // 17 x 17, 7x7 as 1x7 and 7x1
  s.add(p + ".branch1x1", c, 192, 1, 1);
  s.add(p + ".branch7x7_1", c, c7, 1, 1);
  s.add(p + ".branch7x7_2", c7, c7, 1, 7, 1, 0, 3);
  s.add(p + ".branch7x7_3", c7, 192, 7, 1, 1, 3, 0);
  s.add(p + ".branch7x7dbl_1", c, c7, 1, 1);
  s.add(p + ".branch7x7dbl_2", c7, c7, 7, 1, 1, 3, 0);
  s.add(p + ".branch7x7dbl_3", c7, c7, 1, 7, 1, 0, 3);
  s.add(p + ".branch7x7dbl_4", c7, c7, 7, 1, 1, 3, 0);
  s.add(p + ".branch7x7dbl_5", c7, 192, 1, 7, 1, 0, 3);
  s.add(p + ".branch_pool", c, 192, 1, 1);
}

void declare_d(SpecList& s, const std::string& p, int c) {  // 17 -> 8
  s.add(p + ".branch3x3_1", c, 192, 1, 1);
  s.add(p + ".branch3x3_2", 192, 320, 3, 3, 2);
  s.add(p + ".branch7x7x3_1", c, 192, 1, 1);
  s.add(p + ".branch7x7x3_2", 192, 192, 1, 7, 1, 0, 3);
  s.add(p + ".branch7x7x3_3", 192, 192, 7, 1, 1, 3, 0);
  s.add(p + ".branch7x7x3_4", 192, 192, 3, 3, 2);
}

void declare_e(SpecList& s, const std::string& p, int c) {  // 8 x 8, 3x3 split into 1x3 | 3x1
  s.add(p + ".branch1x1", c, 320, 1, 1);
  s.add(p + ".branch3x3_1", c, 384, 1, 1);
  s.add(p + ".branch3x3_2a", 384, 384, 1, 3, 1, 0, 1);
  s.add(p + ".branch3x3_2b", 384, 384, 3, 1, 1, 1, 0);
  s.add(p + ".branch3x3dbl_1", c, 448, 1, 1);
  s.add(p + ".branch3x3dbl_2", 448, 384, 3, 3, 1, 1, 1);
  s.add(p + ".branch3x3dbl_3a", 384, 384, 1, 3, 1, 0, 1);
  s.add(p + ".branch3x3dbl_3b", 384, 384, 3, 1, 1, 1, 0);
  s.add(p + ".branch_pool", c, 192, 1, 1);
}

SpecList make_specs() {
  SpecList s;
  s.add("Conv2d_1a_3x3", 3, 32, 3, 3, 2);
  s.add("Conv2d_2a_3x3", 32, 32, 3, 3);
  s.add("Conv2d_2b_3x3", 32, 64, 3, 3, 1, 1, 1);
  s.add("Conv2d_3b_1x1", 64, 80, 1, 1);
  s.add("Conv2d_4a_3x3", 80, 192, 3, 3);
  declare_a(s, "Mixed_5b", 192, 32);
  declare_a(s, "Mixed_5c", 256, 64);
  declare_a(s, "Mixed_5d", 288, 64);
  declare_b(s, "Mixed_6a", 288);
  declare_c(s, "Mixed_6b", 768, 128);
  declare_c(s, "Mixed_6c", 768, 160);
  declare_c(s, "Mixed_6d", 768, 160);
  declare_c(s, "Mixed_6e", 768, 192);
  declare_d(s, "Mixed_7a", 768);
  declare_e(s, "Mixed_7b", 1280);
  declare_e(s, "Mixed_7c", 2048);
  return s;
}

// ---- loading ---------------------------------------------------------------------------------

std::vector<double> read_finite(const h5::File& f, const std::string& tensor, const Shape& shape) {
  h5::Array a = f.read("/weights/" + tensor, shape);
  for (double v : a.values)
    DIT_CHECK(std::isfinite(v), f.path(), ": tensor '", tensor, "' holds NaN or Inf: the weights file is damaged");
  return std::move(a.values);
}

// conv -> BatchNorm(eps 1e-3) as one convolution: scale = gamma / sqrt(var + eps) per output
// channel, weight * scale, bias = beta - mean * scale. Folded in double, stored in float.
InceptionV3::Conv load_conv(const h5::File& f, const InceptionConvSpec& s) {
  const std::string& n = s.name;
  const std::vector<double> w = read_finite(f, n + ".conv.weight", Shape{s.k, s.c, s.kh, s.kw});
  const Shape channel{s.k};
  const std::vector<double> gamma = read_finite(f, n + ".bn.weight", channel);
  const std::vector<double> beta = read_finite(f, n + ".bn.bias", channel);
  const std::vector<double> mean = read_finite(f, n + ".bn.running_mean", channel);
  const std::vector<double> var = read_finite(f, n + ".bn.running_var", channel);
  InceptionV3::Conv conv;
  conv.spec = s;
  conv.weight.resize(w.size());
  conv.bias.resize(std::size_t(s.k));
  const std::size_t per_out = w.size() / std::size_t(s.k);
  for (std::size_t o = 0; o < std::size_t(s.k); ++o) {
    DIT_CHECK(var[o] + kBatchNormEps > 0, f.path(), ": tensor '", n, ".bn.running_var' is ", var[o], " at [", o,
              "]: a variance must be >= 0");
    const double scale = gamma[o] / std::sqrt(var[o] + kBatchNormEps);
    for (std::size_t i = 0; i < per_out; ++i) conv.weight[o * per_out + i] = float(w[o * per_out + i] * scale);
    conv.bias[o] = float(beta[o] - mean[o] * scale);
  }
  return conv;
}

// ---- the forward pass ------------------------------------------------------------------------

using ConvMap = std::map<std::string, InceptionV3::Conv>;

// conv + folded BatchNorm + ReLU, by module name.
FeatureMaps conv(const ConvMap& convs, const std::string& name, const FeatureMaps& x) {
  const auto it = convs.find(name);
  DIT_CHECK(it != convs.end(), "Inception-V3: no convolution '", name, "'");
  const InceptionV3::Conv& l = it->second;
  DIT_CHECK(x.c == l.spec.c, "Inception-V3: '", name, "' takes ", l.spec.c, " channels, got ", x.c);
  const ConvShape s{.n = x.n, .c = x.c, .h = x.h, .w = x.w, .k = l.spec.k, .kh = l.spec.kh, .kw = l.spec.kw,
                    .sh = l.spec.stride, .sw = l.spec.stride, .ph = l.spec.ph, .pw = l.spec.pw};
  FeatureMaps y(x.n, s.k, s.oh(), s.ow());
  conv2d_forward(s, x.v.data(), l.weight.data(), l.bias.data(), y.v.data());
  relu_inplace(y);
  return y;
}

// Convolutions applied one after another: prefix.names[0], prefix.names[1], ...
FeatureMaps chain(const ConvMap& convs, const std::string& prefix, std::initializer_list<const char*> names,
                  const FeatureMaps& x) {
  FeatureMaps y;
  bool first = true;
  for (const char* n : names) {
    y = conv(convs, prefix + "." + n, first ? x : y);
    first = false;
  }
  return y;
}

FeatureMaps max_pool_3x3_stride2(const FeatureMaps& x) {
  const PoolShape s{.n = x.n, .c = x.c, .h = x.h, .w = x.w, .k = 3, .stride = 2};
  FeatureMaps y(x.n, x.c, s.oh(), s.ow());
  max_pool2d_forward(s, x.v.data(), y.v.data(), nullptr);
  return y;
}

FeatureMaps block_a(const ConvMap& m, const std::string& p, const FeatureMaps& x) {
  const FeatureMaps a = conv(m, p + ".branch1x1", x);
  const FeatureMaps b = chain(m, p, {"branch5x5_1", "branch5x5_2"}, x);
  const FeatureMaps c = chain(m, p, {"branch3x3dbl_1", "branch3x3dbl_2", "branch3x3dbl_3"}, x);
  const FeatureMaps d = conv(m, p + ".branch_pool", pool3x3_same(x, Pool3x3::AverageExcludingPadding));
  return concat_channels({&a, &b, &c, &d});  // 64 + 64 + 96 + pool_features
}

FeatureMaps block_b(const ConvMap& m, const std::string& p, const FeatureMaps& x) {
  const FeatureMaps a = conv(m, p + ".branch3x3", x);
  const FeatureMaps b = chain(m, p, {"branch3x3dbl_1", "branch3x3dbl_2", "branch3x3dbl_3"}, x);
  const FeatureMaps c = max_pool_3x3_stride2(x);
  return concat_channels({&a, &b, &c});  // 384 + 96 + 288
}

FeatureMaps block_c(const ConvMap& m, const std::string& p, const FeatureMaps& x) {
  const FeatureMaps a = conv(m, p + ".branch1x1", x);
  const FeatureMaps b = chain(m, p, {"branch7x7_1", "branch7x7_2", "branch7x7_3"}, x);
  const FeatureMaps c = chain(
      m, p, {"branch7x7dbl_1", "branch7x7dbl_2", "branch7x7dbl_3", "branch7x7dbl_4", "branch7x7dbl_5"}, x);
  const FeatureMaps d = conv(m, p + ".branch_pool", pool3x3_same(x, Pool3x3::AverageExcludingPadding));
  return concat_channels({&a, &b, &c, &d});  // 4 x 192
}

FeatureMaps block_d(const ConvMap& m, const std::string& p, const FeatureMaps& x) {
  const FeatureMaps a = chain(m, p, {"branch3x3_1", "branch3x3_2"}, x);
  const FeatureMaps b = chain(m, p, {"branch7x7x3_1", "branch7x7x3_2", "branch7x7x3_3", "branch7x7x3_4"}, x);
  const FeatureMaps c = max_pool_3x3_stride2(x);
  return concat_channels({&a, &b, &c});  // 320 + 192 + 768
}

// `pool`: average without padding in Mixed_7b; Mixed_7c of the FID network max-pools instead.
FeatureMaps block_e(const ConvMap& m, const std::string& p, const FeatureMaps& x, Pool3x3 pool) {
  const FeatureMaps a = conv(m, p + ".branch1x1", x);
  const FeatureMaps t = conv(m, p + ".branch3x3_1", x);
  const FeatureMaps b1 = conv(m, p + ".branch3x3_2a", t), b2 = conv(m, p + ".branch3x3_2b", t);
  const FeatureMaps u = chain(m, p, {"branch3x3dbl_1", "branch3x3dbl_2"}, x);
  const FeatureMaps c1 = conv(m, p + ".branch3x3dbl_3a", u), c2 = conv(m, p + ".branch3x3dbl_3b", u);
  const FeatureMaps d = conv(m, p + ".branch_pool", pool3x3_same(x, pool));
  return concat_channels({&a, &b1, &b2, &c1, &c2, &d});  // 320 + 2 x 384 + 2 x 384 + 192 = 2048
}

// (n, 3, 299, 299) -> (n, 2048, 8, 8); shapes per image in the comments.
FeatureMaps forward(const ConvMap& m, FeatureMaps x) {
  x = conv(m, "Conv2d_1a_3x3", x);       // (32, 149, 149)
  x = conv(m, "Conv2d_2a_3x3", x);       // (32, 147, 147)
  x = conv(m, "Conv2d_2b_3x3", x);       // (64, 147, 147)
  x = max_pool_3x3_stride2(x);           // (64, 73, 73)
  x = conv(m, "Conv2d_3b_1x1", x);       // (80, 73, 73)
  x = conv(m, "Conv2d_4a_3x3", x);       // (192, 71, 71)
  x = max_pool_3x3_stride2(x);           // (192, 35, 35)
  x = block_a(m, "Mixed_5b", x);         // (256, 35, 35)
  x = block_a(m, "Mixed_5c", x);         // (288, 35, 35)
  x = block_a(m, "Mixed_5d", x);         // (288, 35, 35)
  x = block_b(m, "Mixed_6a", x);         // (768, 17, 17)
  for (const char* p : {"Mixed_6b", "Mixed_6c", "Mixed_6d", "Mixed_6e"}) x = block_c(m, p, x);
  x = block_d(m, "Mixed_7a", x);         // (1280, 8, 8)
  x = block_e(m, "Mixed_7b", x, Pool3x3::AverageExcludingPadding);  // (2048, 8, 8)
  return block_e(m, "Mixed_7c", x, Pool3x3::Max);                  // (2048, 8, 8)
}

// Images [i0, i0 + nb) as (nb, 3, h, w): grey images repeated to RGB; non-finite values refused.
FeatureMaps rgb_batch(const float* images, int i0, int nb, int channels, int h, int w) {
  FeatureMaps x(nb, 3, h, w);
  const std::int64_t plane = std::int64_t(h) * w;
  for (int i = 0; i < nb; ++i)
    for (int ch = 0; ch < 3; ++ch) {
      const float* src = images + (std::int64_t(i0 + i) * channels + (channels == 1 ? 0 : ch)) * plane;
      float* dst = x.v.data() + (std::int64_t(i) * 3 + ch) * plane;
      for (std::int64_t k = 0; k < plane; ++k) {
        DIT_CHECK(std::isfinite(src[k]), "Inception-V3 features: image ", i0 + i, " holds NaN or Inf");
        dst[k] = src[k];
      }
    }
  return x;
}

}  // namespace

const std::vector<InceptionConvSpec>& inception_conv_specs() {
  static const std::vector<InceptionConvSpec> specs = make_specs().v;
  return specs;
}

InceptionV3 InceptionV3::load(const std::string& path) {
  h5::silence_errors();
  h5::verify_seal(path, kRemedy);
  const h5::File f = h5::File::open_read(path);
  DIT_CHECK(f.has_attr("/", "format") && f.attr_string("/", "format") == kFormat, path,
            ": not an Inception-V3 weights file (no attribute format = \"", kFormat, "\"); ", kRemedy);
  const std::int64_t version = f.has_attr("/", "version") ? f.attr_int("/", "version") : -1;
  DIT_CHECK(version == kVersion, path, ": Inception-V3 weights format version ", version, ", expected ", kVersion,
            "; ", kRemedy);
  InceptionV3 net;
  for (const InceptionConvSpec& s : inception_conv_specs()) net.convs_.emplace(s.name, load_conv(f, s));
  return net;
}

Features InceptionV3::features(const float* images, int n, int channels, int h, int w, int batch) const {
  DIT_CHECK(channels == 1 || channels == 3, "Inception-V3 features: images with ", channels,
            " channels; expected 1 (grey, repeated to RGB) or 3");
  DIT_CHECK(n >= 0 && h >= 1 && w >= 1 && batch >= 1, "Inception-V3 features: ", n, " images of ", h, "x", w,
            " in batches of ", batch);
  Features out;
  out.n = n;
  out.f = kInceptionFeatures;
  out.data.assign(std::size_t(n) * kInceptionFeatures, 0.0);
  for (int i0 = 0; i0 < n; i0 += batch) {
    const int nb = std::min(batch, n - i0);
    FeatureMaps x = rgb_batch(images, i0, nb, channels, h, w);
    if (h != kInceptionInput || w != kInceptionInput) x = resize_bilinear(x, kInceptionInput, kInceptionInput);
    const FeatureMaps y = forward(convs_, std::move(x));
    DIT_CHECK(y.c == kInceptionFeatures, "Inception-V3: ", y.c, " output channels");
    for (int i = 0; i < nb; ++i)  // the global average pool, in double
      for (int ch = 0; ch < y.c; ++ch) {
        const float* p = y.v.data() + (std::int64_t(i) * y.c + ch) * y.plane();
        double s = 0;
        for (std::int64_t k = 0; k < y.plane(); ++k) s += p[k];
        out.data[std::size_t(i0 + i) * kInceptionFeatures + std::size_t(ch)] = s / double(y.plane());
      }
  }
  return out;
}

Features inception_features(const std::string& weights_h5, const std::vector<float>& images, int n, int c, int h,
                            int w) {
  DIT_CHECK(std::int64_t(images.size()) == std::int64_t(n) * c * h * w, "Inception-V3 features: ", images.size(),
            " values for ", n, " images of ", c, "x", h, "x", w);
  return InceptionV3::load(weights_h5).features(images.data(), n, c, h, w);
}

Gaussian load_reference_npz(const std::string& path, std::int64_t f) {
  const npz::Array mu = npz::read(path, "mu");
  DIT_CHECK(mu.shape == std::vector<std::int64_t>{f}, path, ": array 'mu' has shape ", mu.shape_text(),
            ", expected (", f, ",): the mean of the ", f, "-d features");
  const npz::Array sigma = npz::read(path, "sigma");
  DIT_CHECK(sigma.shape == (std::vector<std::int64_t>{f, f}), path, ": array 'sigma' has shape ",
            sigma.shape_text(), ", expected (", f, ", ", f, "): the covariance of the ", f, "-d features");
  for (std::size_t i = 0; i < mu.values.size(); ++i)
    DIT_CHECK(std::isfinite(mu.values[i]), path, ": array 'mu' holds NaN or Inf at [", i, "]");
  for (std::size_t i = 0; i < sigma.values.size(); ++i)
    DIT_CHECK(std::isfinite(sigma.values[i]), path, ": array 'sigma' holds NaN or Inf at [", i / std::size_t(f), ", ",
              i % std::size_t(f), "]");
  Gaussian g;
  g.f = f;
  g.mu = mu.values;
  g.sigma = sigma.values;
  return g;
}

}  // namespace dit::eval
