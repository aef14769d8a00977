// The evaluation classifier (see classifier.h): three 3x3 convolutions (16, 32, 64 channels), each
// followed by ReLU and 2x2 max pooling, then a 128-unit fully connected layer with ReLU (the
// feature space) and a linear layer to the class logits. Trained with Adam on softmax
// cross-entropy; every pass is explicit here, as the DiT layers' are.
#include "eval/classifier.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>

#include "backend/cpu/ordered_gemm.h"
#include "core/error.h"
#include "eval/conv.h"
#include "io/dataset.h"
#include "io/h5.h"
#include "io/sealed_h5.h"
#include "io/weights.h"

namespace dit::eval {

namespace {

constexpr int kConvs = 3;
constexpr int kWidths[kConvs] = {16, 32, 64};
constexpr int kHidden = Classifier::kFeatureDim;

// y (n, out) = x (n, in) w^T + b.
void linear_forward(const float* x, int n, int in, int out, const float* w, const float* b, float* y) {
  cpu_sgemm_ordered(Transpose::No, Transpose::Yes, n, out, in, 1.f, x, in, w, in, 0.f, y, out);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < out; ++j) y[std::int64_t(i) * out + j] += b[j];
}

// dw = dy^T x, db = column sums of dy, dx = dy w (dx may be null).
void linear_backward(const float* x, int n, int in, int out, const float* w, const float* dy, float* dx, float* dw,
                     float* db) {
  cpu_sgemm_ordered(Transpose::Yes, Transpose::No, out, in, n, 1.f, dy, out, x, in, 0.f, dw, in);
  std::fill(db, db + out, 0.f);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < out; ++j) db[j] += dy[std::int64_t(i) * out + j];
  if (dx) cpu_sgemm_ordered(Transpose::No, Transpose::No, n, in, out, 1.f, dy, out, w, in, 0.f, dx, in);
}

void relu(std::vector<float>& v) {
  for (float& x : v) x = std::max(x, 0.f);
}
// g *= (y > 0), y the ReLU's output.
void relu_backward(const std::vector<float>& y, std::vector<float>& g) {
  for (std::size_t i = 0; i < g.size(); ++i)
    if (y[i] <= 0.f) g[i] = 0.f;
}

// Image `src` moved by (dy, dx) pixels into `dst`, the uncovered border filled with -1 (black):
// the training augmentation (garments shifted within the frame).
void shifted_copy(const float* src, int c, int h, int w, int dy, int dx, float* dst) {
  for (int ch = 0; ch < c; ++ch)
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) {
        const int sy = y - dy, sx = x - dx;
        dst[(ch * h + y) * w + x] = (sy >= 0 && sy < h && sx >= 0 && sx < w) ? src[(ch * h + sy) * w + sx] : -1.f;
      }
}

std::vector<std::uint32_t> shuffled(std::int64_t n, std::mt19937_64& gen) {
  std::vector<std::uint32_t> order(n);
  for (std::int64_t i = 0; i < n; ++i) order[i] = std::uint32_t(i);
  for (std::int64_t i = n - 1; i > 0; --i) std::swap(order[i], order[gen() % std::uint64_t(i + 1)]);
  return order;
}

}  // namespace

struct Classifier::Activations {
  ConvShape conv[kConvs];
  PoolShape pool[kConvs];
  std::vector<float> relu_out[kConvs], pooled[kConvs];
  std::vector<std::int32_t> argmax[kConvs];
  std::vector<float> hidden, logits;  // (n, kHidden), (n, classes)
};

ImageSet load_images(const Dataset& data, std::int64_t limit) {
  const SampleShape s = data.shape();
  ImageSet set;
  set.n = limit > 0 ? std::min(limit, data.size()) : data.size();
  set.c = int(s.channels), set.h = int(s.height), set.w = int(s.width);
  set.pixels.resize(set.n * set.image_size());
  set.labels.resize(set.n);
  for (std::int64_t i = 0; i < set.n; ++i) set.labels[i] = data.get(i, set.pixels.data() + i * set.image_size());
  return set;
}

Classifier::Classifier(int c, int h, int w, int classes, std::uint64_t seed)
    : c_(c), h_(h), w_(w), classes_(classes) {
  DIT_CHECK(c >= 1 && c <= 16 && h >= 8 && w >= 8 && h % 8 == 0 && w % 8 == 0 && h <= 512 && w <= 512,
            "classifier: images of ", c, "x", h, "x", w, ": expected 1 to 16 channels and sides divisible by 8 "
            "(8 to 512 pixels)");
  DIT_CHECK(classes >= 2 && classes <= 100000, "classifier: ", classes, " classes: expected 2 or more");
  std::mt19937_64 gen(seed);
  auto add = [&](std::string name, std::vector<std::int64_t> shape, double fan_in) {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    Param p{std::move(name), std::move(shape), std::vector<float>(n)};
    if (fan_in > 0) {  // He initialisation for ReLU layers; zero biases
      std::normal_distribution<double> d(0.0, std::sqrt(2.0 / fan_in));
      for (float& v : p.value) v = float(d(gen));
    }
    params_.push_back(std::move(p));
  };
  int in = c;
  for (int i = 0; i < kConvs; ++i) {
    const std::string layer = "conv" + std::to_string(i + 1);
    add(layer + ".weight", {kWidths[i], in, 3, 3}, in * 9.0);
    add(layer + ".bias", {kWidths[i]}, 0);
    in = kWidths[i];
  }
  const int flat = kWidths[kConvs - 1] * (h / 8) * (w / 8);
  add("fc1.weight", {kHidden, flat}, flat);
  add("fc1.bias", {kHidden}, 0);
  add("fc2.weight", {classes, kHidden}, kHidden * 2.0);  // variance 1 / fan_in: no ReLU follows
  add("fc2.bias", {classes}, 0);
}

void Classifier::forward(const float* x, int n, Activations& a) const {
  const float* in = x;
  int c = c_, h = h_, w = w_;
  for (int i = 0; i < kConvs; ++i) {
    a.conv[i] = ConvShape{.n = n, .c = c, .h = h, .w = w, .k = kWidths[i], .kh = 3, .kw = 3, .ph = 1, .pw = 1};
    a.relu_out[i].resize(a.conv[i].out_size());
    conv2d_forward(a.conv[i], in, params_[2 * i].value.data(), params_[2 * i + 1].value.data(),
                   a.relu_out[i].data());
    relu(a.relu_out[i]);
    a.pool[i] = PoolShape{.n = n, .c = kWidths[i], .h = h, .w = w, .k = 2, .stride = 2};
    a.pooled[i].resize(a.pool[i].out_size());
    a.argmax[i].resize(a.pool[i].out_size());
    max_pool2d_forward(a.pool[i], a.relu_out[i].data(), a.pooled[i].data(), a.argmax[i].data());
    in = a.pooled[i].data();
    c = kWidths[i], h /= 2, w /= 2;
  }
  const int flat = c * h * w;
  a.hidden.resize(std::int64_t(n) * kHidden);
  linear_forward(in, n, flat, kHidden, params_[6].value.data(), params_[7].value.data(), a.hidden.data());
  relu(a.hidden);
  a.logits.resize(std::int64_t(n) * classes_);
  linear_forward(a.hidden.data(), n, kHidden, classes_, params_[8].value.data(), params_[9].value.data(),
                 a.logits.data());
}

// Mean softmax cross-entropy of the batch; fills grads (one per parameter).
double Classifier::backward(const float* x, const int* labels, int n, Activations& a,
                            std::vector<std::vector<float>>& grads) const {
  std::vector<float> dlogits(a.logits.size());
  double loss = 0;
  for (int i = 0; i < n; ++i) {
    const float* z = a.logits.data() + std::int64_t(i) * classes_;
    float* g = dlogits.data() + std::int64_t(i) * classes_;
    const float top = *std::max_element(z, z + classes_);
    double sum = 0;
    for (int j = 0; j < classes_; ++j) sum += std::exp(double(z[j] - top));
    loss += std::log(sum) - (z[labels[i]] - top);
    for (int j = 0; j < classes_; ++j) g[j] = float((std::exp(double(z[j] - top)) / sum - (j == labels[i])) / n);
  }
  std::vector<float> dhidden(a.hidden.size());
  linear_backward(a.hidden.data(), n, kHidden, classes_, params_[8].value.data(), dlogits.data(), dhidden.data(),
                  grads[8].data(), grads[9].data());
  relu_backward(a.hidden, dhidden);
  std::vector<float> dflat(a.pooled[kConvs - 1].size());
  const int flat = int(dflat.size() / n);
  linear_backward(a.pooled[kConvs - 1].data(), n, flat, kHidden, params_[6].value.data(), dhidden.data(),
                  dflat.data(), grads[6].data(), grads[7].data());
  std::vector<float> dpooled = std::move(dflat), drelu;
  for (int i = kConvs - 1; i >= 0; --i) {
    drelu.resize(a.relu_out[i].size());
    max_pool2d_backward(a.pool[i], dpooled.data(), a.argmax[i].data(), drelu.data());
    relu_backward(a.relu_out[i], drelu);
    const float* in = i == 0 ? x : a.pooled[i - 1].data();
    dpooled.assign(i == 0 ? 0 : a.pooled[i - 1].size(), 0.f);
    conv2d_backward(a.conv[i], in, params_[2 * i].value.data(), drelu.data(), i == 0 ? nullptr : dpooled.data(),
                    grads[2 * i].data(), grads[2 * i + 1].data());
  }
  return loss / n;
}

double Classifier::train(const ImageSet& train, const ImageSet& test, const ClassifierTraining& how) {
  DIT_CHECK(train.c == c_ && train.h == h_ && train.w == w_ && test.c == c_ && test.h == h_ && test.w == w_,
            "classifier: training images of ", train.c, "x", train.h, "x", train.w, " for a classifier of ", c_, "x",
            h_, "x", w_);
  DIT_CHECK(how.epochs >= 1 && how.batch >= 1 && how.lr > 0, "classifier: epochs, batch and lr must be positive");
  std::mt19937_64 gen(how.seed ^ 0x5eedc1a55ull);
  std::vector<std::vector<float>> grads, m, v;
  for (const Param& p : params_) {
    grads.emplace_back(p.value.size());
    m.emplace_back(p.value.size());
    v.emplace_back(p.value.size());
  }
  const double b1 = 0.9, b2 = 0.999, eps = 1e-8;
  const std::int64_t total = how.epochs * ((train.n + how.batch - 1) / how.batch);
  std::int64_t step = 0;
  Activations a;
  std::vector<float> xb;
  std::vector<int> yb;
  for (int epoch = 1; epoch <= how.epochs; ++epoch) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto order = shuffled(train.n, gen);
    double loss_sum = 0;
    std::int64_t batches = 0;
    for (std::int64_t start = 0; start < train.n; start += how.batch) {
      const int n = int(std::min<std::int64_t>(how.batch, train.n - start));
      xb.resize(std::int64_t(n) * train.image_size());
      yb.resize(n);
      for (int i = 0; i < n; ++i) {
        const std::int64_t src = order[start + i];
        const int dy = int(gen() % (2 * how.max_shift + 1)) - how.max_shift;
        const int dx = int(gen() % (2 * how.max_shift + 1)) - how.max_shift;
        shifted_copy(train.pixels.data() + src * train.image_size(), c_, h_, w_, dy, dx,
                     xb.data() + std::int64_t(i) * train.image_size());
        yb[i] = train.labels[src];
      }
      forward(xb.data(), n, a);
      loss_sum += backward(xb.data(), yb.data(), n, a, grads);
      ++batches, ++step;
      const double c1 = 1 - std::pow(b1, double(step)), c2 = 1 - std::pow(b2, double(step));
      const double lr = how.lr * 0.5 * (1 + std::cos(3.14159265358979 * double(step - 1) / double(total)));
      for (std::size_t p = 0; p < params_.size(); ++p)
        for (std::size_t i = 0; i < grads[p].size(); ++i) {
          const double g = grads[p][i];
          m[p][i] = float(b1 * m[p][i] + (1 - b1) * g);
          v[p][i] = float(b2 * v[p][i] + (1 - b2) * g * g);
          params_[p].value[i] -= float(lr * (m[p][i] / c1) / (std::sqrt(v[p][i] / c2) + eps));
        }
    }
    test_accuracy_ = accuracy(test);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("classifier epoch %d/%d  loss %.4f  test accuracy %.2f%%  (%.0f s)\n", epoch, how.epochs,
                loss_sum / std::max<std::int64_t>(batches, 1), 100 * test_accuracy_, secs);
    std::fflush(stdout);
  }
  return test_accuracy_;
}

Classified Classifier::classify(const ImageSet& images) const {
  DIT_CHECK(images.c == c_ && images.h == h_ && images.w == w_, "classifier: images of ", images.c, "x", images.h,
            "x", images.w, ", but the classifier takes ", c_, "x", h_, "x", w_);
  Classified out;
  out.predicted.resize(images.n);
  out.features.n = images.n;
  out.features.f = kHidden;
  out.features.data.resize(images.n * kHidden);
  Activations a;
  constexpr int kBatch = 256;
  for (std::int64_t start = 0; start < images.n; start += kBatch) {
    const int n = int(std::min<std::int64_t>(kBatch, images.n - start));
    forward(images.pixels.data() + start * images.image_size(), n, a);
    std::copy(a.hidden.begin(), a.hidden.end(), out.features.data.begin() + start * kHidden);
    for (int i = 0; i < n; ++i) {
      const float* z = a.logits.data() + std::int64_t(i) * classes_;
      out.predicted[start + i] = int(std::max_element(z, z + classes_) - z);
    }
  }
  return out;
}

double Classifier::accuracy(const ImageSet& images) const {
  if (images.n == 0) return 0;
  const Classified c = classify(images);
  std::int64_t right = 0;
  for (std::int64_t i = 0; i < images.n; ++i) right += c.predicted[i] == images.labels[i];
  return double(right) / double(images.n);
}

void Classifier::save(const std::string& path, const std::string& trained_on) const {
  write_sealed_file(path, "classifier", [&](hid_t file, const std::string& where) {
    h5::Handle g = h5::create_group(file, "classifier", where);
    h5::write_attr_ints(g.get(), "image_shape", {c_, h_, w_}, h5::AttrShape::List, where);
    h5::write_attr_ints(g.get(), "num_classes", {classes_}, h5::AttrShape::Scalar, where);
    h5::write_attr_double(g.get(), "test_accuracy", test_accuracy_, where);
    h5::write_attr_string(g.get(), "trained_on", trained_on, where);
    h5::Handle w = h5::create_group(file, "weights", where);
    for (const Param& p : params_) {
      Shape s;
      for (auto d : p.shape) s.dims[s.rank++] = d;
      h5::write_tensor(w.get(), p.name, s, p.value.data(), where);
    }
  });
}

Classifier Classifier::load(const std::string& path) {
  h5::silence_errors();
  h5::verify_seal(path, "train a new one with dit_mp evaluate --train-classifier");
  const h5::File f = h5::File::open_read(path);
  DIT_CHECK(f.exists("/classifier"), path, ": no /classifier group: not a classifier file (dit_mp evaluate "
                                           "--train-classifier writes one)");
  const auto shape = h5::read_attr_ints(f, "/classifier", "image_shape", 3);
  const std::int64_t classes = h5::read_attr_int(f, "/classifier", "num_classes");
  DIT_CHECK(shape[0] >= 1 && shape[0] <= 16 && shape[1] >= 8 && shape[1] <= 512 && shape[2] >= 8 &&
                shape[2] <= 512 && classes >= 2 && classes <= 100000,
            path, ": /classifier image_shape or num_classes out of range");
  Classifier net{int(shape[0]), int(shape[1]), int(shape[2]), int(classes), 0};
  for (Param& p : net.params_) {
    Shape s;
    for (auto d : p.shape) s.dims[s.rank++] = d;
    p.value = read_weight_tensor(f, p.name, s);
    for (float v : p.value)
      DIT_CHECK(std::isfinite(v), path, ": tensor '", p.name, "' holds a non-finite value: the file is damaged");
  }
  net.test_accuracy_ = h5::read_attr_double(f, "/classifier", "test_accuracy");
  net.trained_on_ = f.attr_string("/classifier", "trained_on");
  return net;
}

}  // namespace dit::eval
