// The FID Inception-V3 (see inception.h): the convolution table, weight loading with BatchNorm
// folding, and the forward pass block by block on a Backend. Block names, branch names and shapes follow
// torchvision's Inception3, whose names the FID weights use; the FID variant's pooling branches
// are written where they differ (A, C and the first E block average without the padding, the
// last E block max-pools). tools/torch_inception.py is the PyTorch twin that the test compares with.
#include "eval/inception.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <utility>

#include "backend/backend.h"
#include "core/arena.h"
#include "core/error.h"
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

// ---- the forward pass on a backend ------------------------------------------------------------

using ConvMap = std::map<std::string, InceptionV3::Conv>;

// The largest activation of the network, Conv2d_2b_3x3's output (64, 147, 147), in bytes per image;
// a block's branches together hold less (Mixed_5d: 784 channels of 35 x 35).
constexpr std::size_t kLargestActivationBytes = std::size_t(64) * 147 * 147 * sizeof(float);

// The network on one backend, fp32: the folded weights uploaded once; a stage (a convolution or
// pool of the stem, or a whole Inception block) reads its input from one of two arenas and writes
// its output into the other (reset first), with a block's branches in a scratch arena reset per
// stage. Each arena is one chunk of the largest activation of a batch (5.5 MB an image), so a
// batch of n images holds 16.6 n MB of activations besides the 87 MB of weights.
class Runner {
 public:
  Runner(Backend& be, const ConvMap& convs, int batch)
      : be_(be),
        weights_(be, weight_bytes(convs)),
        scratch_(be, chunk_bytes(batch)),
        stage_{Arena(be, chunk_bytes(batch)), Arena(be, chunk_bytes(batch))} {
    for (const auto& [name, c] : convs) {
      const InceptionConvSpec& s = c.spec;
      Layer l{s, weights_.tensor(Shape{s.k, s.c, s.kh, s.kw}, DType::F32), weights_.tensor(Shape{s.k}, DType::F32)};
      be_.copy(l.w, Tensor{const_cast<float*>(c.weight.data()), DType::F32, l.w.shape, Device::Host});
      be_.copy(l.b, Tensor{const_cast<float*>(c.bias.data()), DType::F32, l.b.shape, Device::Host});
      layers_.emplace(name, l);
    }
  }

  // Pool features of x (nb, 3, h, w) host float32, written as (nb, 2048) doubles to `out`.
  void features(const std::vector<float>& x, int nb, int h, int w, double* out);

 private:
  struct Layer {
    InceptionConvSpec spec;
    Tensor w, b;  // (k, c, kh, kw), (k)
  };
  // Every weight and bias with the arena's alignment: the weights arena is one allocation.
  static std::size_t weight_bytes(const ConvMap& convs) {
    std::size_t bytes = 0;
    for (const auto& [name, c] : convs) bytes += (c.weight.size() + c.bias.size()) * sizeof(float) + 512;
    return bytes;
  }
  // An activation arena's chunk: the largest activation of `batch` images, with room for the
  // alignment of a block's dozen tensors.
  static std::size_t chunk_bytes(int batch) { return std::size_t(batch) * kLargestActivationBytes + (64u << 10); }

  // A new tensor in the arena the current stage does not read from (call once per stage).
  Tensor stage_output(Shape s) {
    cur_ = 1 - cur_;
    stage_[cur_].reset();
    return stage_[cur_].tensor(s, DType::F32);
  }
  Tensor temp(Shape s) { return scratch_.tensor(s, DType::F32); }

  // conv + folded BatchNorm + ReLU into `y`, by module name.
  void conv_to(const std::string& name, const Tensor& x, const Tensor& y) {
    const auto it = layers_.find(name);
    DIT_CHECK(it != layers_.end(), "Inception-V3: no convolution '", name, "'");
    const InceptionConvSpec& s = it->second.spec;
    DIT_CHECK(x.dim(1) == s.c, "Inception-V3: '", name, "' takes ", s.c, " channels, got ", x.shape.str());
    const ConvGeometry g{s.stride, s.stride, s.ph, s.ph, s.pw, s.pw};
    be_.conv2d_fwd(x, it->second.w, it->second.b, g, y, Accumulate::Overwrite);
    be_.relu_fwd(y, y);
  }
  // The output shape of convolution `name` on x.
  Shape conv_out(const std::string& name, const Tensor& x) const {
    const InceptionConvSpec& s = layers_.at(name).spec;
    return Shape{x.dim(0), s.k, (x.dim(2) + 2 * s.ph - s.kh) / s.stride + 1,
                 (x.dim(3) + 2 * s.pw - s.kw) / s.stride + 1};
  }
  // A stem convolution (a stage) or a branch convolution (scratch).
  Tensor stem_conv(const std::string& name, const Tensor& x) {
    const Tensor y = stage_output(conv_out(name, x));
    conv_to(name, x, y);
    return y;
  }
  Tensor conv(const std::string& name, const Tensor& x) {
    const Tensor y = temp(conv_out(name, x));
    conv_to(name, x, y);
    return y;
  }
  // Convolutions applied one after another: prefix.names[0], prefix.names[1], ...
  Tensor chain(const std::string& prefix, std::initializer_list<const char*> names, Tensor x) {
    for (const char* n : names) x = conv(prefix + "." + n, x);
    return x;
  }
  Tensor pool(const Tensor& x, const PoolGeometry& g, PoolKind kind, bool stage) {
    const Shape s{x.dim(0), x.dim(1), (x.dim(2) + g.pad_top + g.pad_bottom - g.kh) / g.stride_h + 1,
                  (x.dim(3) + g.pad_left + g.pad_right - g.kw) / g.stride_w + 1};
    const Tensor y = stage ? stage_output(s) : temp(s);
    be_.pool2d_fwd(x, g, kind, y);
    return y;
  }
  Tensor max_pool_3x3_stride2(const Tensor& x, bool stage) {
    return pool(x, PoolGeometry::square(3, 2), PoolKind::Max, stage);
  }
  // 3x3 stride-1 windows with one pixel of padding: the map keeps its size.
  Tensor pool_same(const Tensor& x, PoolKind kind) { return pool(x, PoolGeometry::square(3, 1, 1), kind, false); }
  // torch.cat(parts, 1) as the stage's output.
  Tensor concat(std::initializer_list<Tensor> parts) {
    const Tensor& f = *parts.begin();
    std::int64_t c = 0;
    for (const Tensor& p : parts) c += p.dim(1);
    const Tensor y = stage_output(Shape{f.dim(0), c, f.dim(2), f.dim(3)});
    std::int64_t at = 0;
    for (const Tensor& p : parts) {
      be_.copy_channels(p, y, at);
      at += p.dim(1);
    }
    return y;
  }

  Tensor block_a(const std::string& p, const Tensor& x);
  Tensor block_b(const std::string& p, const Tensor& x);
  Tensor block_c(const std::string& p, const Tensor& x);
  Tensor block_d(const std::string& p, const Tensor& x);
  Tensor block_e(const std::string& p, const Tensor& x, PoolKind pool);
  Tensor forward(const Tensor& x);

  Backend& be_;
  Arena weights_, scratch_;
  Arena stage_[2];
  int cur_ = 0;  // the arena holding the current stage's input
  std::map<std::string, Layer> layers_;
};

Tensor Runner::block_a(const std::string& p, const Tensor& x) {
  scratch_.reset();
  const Tensor a = conv(p + ".branch1x1", x);
  const Tensor b = chain(p, {"branch5x5_1", "branch5x5_2"}, x);
  const Tensor c = chain(p, {"branch3x3dbl_1", "branch3x3dbl_2", "branch3x3dbl_3"}, x);
  const Tensor d = conv(p + ".branch_pool", pool_same(x, PoolKind::AverageExcludingPadding));
  return concat({a, b, c, d});  // 64 + 64 + 96 + pool_features
}

Tensor Runner::block_b(const std::string& p, const Tensor& x) {
  scratch_.reset();
  const Tensor a = conv(p + ".branch3x3", x);
  const Tensor b = chain(p, {"branch3x3dbl_1", "branch3x3dbl_2", "branch3x3dbl_3"}, x);
  const Tensor c = max_pool_3x3_stride2(x, false);
  return concat({a, b, c});  // 384 + 96 + 288
}

Tensor Runner::block_c(const std::string& p, const Tensor& x) {
  scratch_.reset();
  const Tensor a = conv(p + ".branch1x1", x);
  const Tensor b = chain(p, {"branch7x7_1", "branch7x7_2", "branch7x7_3"}, x);
  const Tensor c =
      chain(p, {"branch7x7dbl_1", "branch7x7dbl_2", "branch7x7dbl_3", "branch7x7dbl_4", "branch7x7dbl_5"}, x);
  const Tensor d = conv(p + ".branch_pool", pool_same(x, PoolKind::AverageExcludingPadding));
  return concat({a, b, c, d});  // 4 x 192
}

Tensor Runner::block_d(const std::string& p, const Tensor& x) {
  scratch_.reset();
  const Tensor a = chain(p, {"branch3x3_1", "branch3x3_2"}, x);
  const Tensor b = chain(p, {"branch7x7x3_1", "branch7x7x3_2", "branch7x7x3_3", "branch7x7x3_4"}, x);
  const Tensor c = max_pool_3x3_stride2(x, false);
  return concat({a, b, c});  // 320 + 192 + 768
}

// `pool`: average without padding in Mixed_7b; Mixed_7c of the FID network max-pools instead.
Tensor Runner::block_e(const std::string& p, const Tensor& x, PoolKind pool) {
  scratch_.reset();
  const Tensor a = conv(p + ".branch1x1", x);
  const Tensor t = conv(p + ".branch3x3_1", x);
  const Tensor b1 = conv(p + ".branch3x3_2a", t), b2 = conv(p + ".branch3x3_2b", t);
  const Tensor u = chain(p, {"branch3x3dbl_1", "branch3x3dbl_2"}, x);
  const Tensor c1 = conv(p + ".branch3x3dbl_3a", u), c2 = conv(p + ".branch3x3dbl_3b", u);
  const Tensor d = conv(p + ".branch_pool", pool_same(x, pool));
  return concat({a, b1, b2, c1, c2, d});  // 320 + 2 x 384 + 2 x 384 + 192 = 2048
}

// (n, 3, 299, 299) -> (n, 2048, 8, 8); shapes per image in the comments.
Tensor Runner::forward(const Tensor& input) {
  Tensor x = stem_conv("Conv2d_1a_3x3", input);  // (32, 149, 149)
  x = stem_conv("Conv2d_2a_3x3", x);              // (32, 147, 147)
  x = stem_conv("Conv2d_2b_3x3", x);              // (64, 147, 147)
  x = max_pool_3x3_stride2(x, true);              // (64, 73, 73)
  x = stem_conv("Conv2d_3b_1x1", x);              // (80, 73, 73)
  x = stem_conv("Conv2d_4a_3x3", x);              // (192, 71, 71)
  x = max_pool_3x3_stride2(x, true);              // (192, 35, 35)
  x = block_a("Mixed_5b", x);                     // (256, 35, 35)
  x = block_a("Mixed_5c", x);                     // (288, 35, 35)
  x = block_a("Mixed_5d", x);                     // (288, 35, 35)
  x = block_b("Mixed_6a", x);                     // (768, 17, 17)
  for (const char* p : {"Mixed_6b", "Mixed_6c", "Mixed_6d", "Mixed_6e"}) x = block_c(p, x);
  x = block_d("Mixed_7a", x);                                  // (1280, 8, 8)
  x = block_e("Mixed_7b", x, PoolKind::AverageExcludingPadding);  // (2048, 8, 8)
  return block_e("Mixed_7c", x, PoolKind::Max);                   // (2048, 8, 8)
}

void Runner::features(const std::vector<float>& images, int nb, int h, int w, double* out) {
  // The batch into the stage arena (resized there when not 299 x 299), then the network.
  scratch_.reset();
  const Shape raw{nb, 3, h, w};
  const bool resize = h != kInceptionInput || w != kInceptionInput;
  const Tensor x = resize ? temp(raw) : stage_output(raw);
  be_.copy(x, Tensor{const_cast<float*>(images.data()), DType::F32, raw, Device::Host});
  Tensor in = x;
  if (resize) {
    in = stage_output(Shape{nb, 3, kInceptionInput, kInceptionInput});
    be_.resize_bilinear(x, in);
  }
  const Tensor y = forward(in);
  DIT_CHECK(y.dim(1) == kInceptionFeatures, "Inception-V3: ", y.shape.str(), " at the output");
  // The global average pool ("pool_3").
  const Tensor pooled = temp(Shape{nb, y.dim(1), 1, 1});
  be_.pool2d_fwd(y, PoolGeometry::global(int(y.dim(2)), int(y.dim(3))), PoolKind::AverageIncludingPadding, pooled);
  std::vector<float> host(static_cast<std::size_t>(pooled.numel()));
  be_.copy(Tensor{host.data(), DType::F32, pooled.shape, Device::Host}, pooled);
  be_.synchronize();
  std::copy(host.begin(), host.end(), out);
}

// Images [i0, i0 + nb) as (nb, 3, h, w): grey images repeated to RGB; non-finite values refused.
std::vector<float> rgb_batch(const float* images, int i0, int nb, int channels, int h, int w) {
  const std::int64_t plane = std::int64_t(h) * w;
  std::vector<float> x(static_cast<std::size_t>(nb * 3 * plane));
  for (int i = 0; i < nb; ++i)
    for (int ch = 0; ch < 3; ++ch) {
      const float* src = images + (std::int64_t(i0 + i) * channels + (channels == 1 ? 0 : ch)) * plane;
      float* dst = x.data() + (std::int64_t(i) * 3 + ch) * plane;
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

Features InceptionV3::features(const float* images, int n, int channels, int h, int w, int batch,
                               const std::string& backend) const {
  DIT_CHECK(channels == 1 || channels == 3, "Inception-V3 features: images with ", channels,
            " channels; expected 1 (grey, repeated to RGB) or 3");
  DIT_CHECK(n >= 0 && h >= 1 && w >= 1 && batch >= 1, "Inception-V3 features: ", n, " images of ", h, "x", w,
            " in batches of ", batch);
  Features out;
  out.n = n;
  out.f = kInceptionFeatures;
  out.data.assign(std::size_t(n) * kInceptionFeatures, 0.0);
  if (n == 0) return out;
  const std::unique_ptr<Backend> be = make_backend(backend, DType::F32);
  Runner net(*be, convs_, std::min(batch, n));
  for (int i0 = 0; i0 < n; i0 += batch) {
    const int nb = std::min(batch, n - i0);
    net.features(rgb_batch(images, i0, nb, channels, h, w), nb, h, w,
                 out.data.data() + std::size_t(i0) * kInceptionFeatures);
  }
  return out;
}

Features inception_features(const std::string& weights_h5, const std::vector<float>& images, int n, int c, int h,
                            int w) {
  return inception_features(weights_h5, images, n, c, h, w, "cpu");
}

Features inception_features(const std::string& weights_h5, const std::vector<float>& images, int n, int c, int h,
                            int w, const std::string& backend) {
  DIT_CHECK(std::int64_t(images.size()) == std::int64_t(n) * c * h * w, "Inception-V3 features: ", images.size(),
            " values for ", n, " images of ", c, "x", h, "x", w);
  return InceptionV3::load(weights_h5).features(images.data(), n, c, h, w, kInceptionBatch, backend);
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
