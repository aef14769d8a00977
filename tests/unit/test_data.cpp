// The data side: dataset-file writers (Fashion-MNIST IDX, image folders, .npy latents) on inputs
// the tests generate themselves, the H5Dataset schema checks on hand-made bad files, and PNG
// output. Exact pixel values throughout; one test reads the real Fashion-MNIST test split.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <stb/stb_image.h>
#include <stb/stb_image_write.h>
#include <unistd.h>
#include <zlib.h>

#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "core/error.h"
#include "io/h5.h"
#include "io/h5_dataset.h"
#include "io/png.h"
#include "io/prepare.h"
#include "io/sealed_h5.h"

namespace dit {
namespace {

namespace fs = std::filesystem;

// A fresh folder per test, removed afterwards.
struct TempDir {
  fs::path path;
  TempDir() {
    static int counter = 0;
    path = fs::temp_directory_path() /
           ("dit_data_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(path))
      names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
};

// The message of the dit::Error that f throws ("" if it throws none).
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_ERROR_HAS(stmt, ...)                                                           \
  do {                                                                                        \
    const std::string msg_ = error_of([&] { stmt; });                                         \
    EXPECT_FALSE(msg_.empty()) << #stmt << " did not throw";                                  \
    for (const std::string& frag_ : std::vector<std::string>{__VA_ARGS__})                    \
      EXPECT_NE(msg_.find(frag_), std::string::npos) << "'" << frag_ << "' not in: " << msg_; \
  } while (0)

// --- Fashion-MNIST IDX --------------------------------------------------------------------------

void write_gz(const std::string& path, std::uint32_t magic, const std::vector<std::uint32_t>& dims,
              const std::vector<std::uint8_t>& data) {
  std::vector<std::uint8_t> bytes;
  auto be32 = [&](std::uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) bytes.push_back(std::uint8_t(v >> s));
  };
  be32(magic);
  for (auto d : dims) be32(d);
  bytes.insert(bytes.end(), data.begin(), data.end());
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), unsigned(bytes.size())), int(bytes.size()));
  gzclose(f);
}

int pixel(int i, int r, int c) { return (i * 61 + r * 28 + c) % 256; }  // hits 0 and 255

// n images of 28x28 (pattern above) and the given labels, as train-*.gz in dir.
void write_fashion(const TempDir& dir, int n, const std::vector<std::uint8_t>& labels) {
  std::vector<std::uint8_t> px;
  for (int i = 0; i < n; ++i)
    for (int r = 0; r < 28; ++r)
      for (int c = 0; c < 28; ++c) px.push_back(std::uint8_t(pixel(i, r, c)));
  write_gz(dir / "train-images-idx3-ubyte.gz", 0x803, {std::uint32_t(n), 28, 28}, px);
  write_gz(dir / "train-labels-idx1-ubyte.gz", 0x801, {std::uint32_t(labels.size())}, labels);
}

TEST(PrepareFashion, SmallIdxRoundTrip) {
  TempDir dir;
  const std::vector<std::uint8_t> labels = {3, 0, 9, 1, 3};
  write_fashion(dir, 5, labels);
  const PrepareResult r = prepare_fashion_mnist(dir.path.string(), dir / "fm.h5", "train");
  EXPECT_EQ(r.samples, 5);
  EXPECT_EQ(r.num_classes, 10);

  H5Dataset ds(dir / "fm.h5");
  ASSERT_EQ(ds.size(), 5);
  EXPECT_EQ(ds.shape().channels, 1);
  EXPECT_EQ(ds.shape().height, 32);
  EXPECT_EQ(ds.shape().width, 32);
  EXPECT_EQ(ds.num_classes(), 10);
  EXPECT_EQ(ds.kind(), "images");
  EXPECT_EQ(ds.source(), "fashion-mnist train");
  std::vector<float> x(32 * 32);
  int seen_min = 0, seen_max = 0;
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(ds.get(i, x.data()), labels[std::size_t(i)]);
    EXPECT_EQ(ds.label(i), labels[std::size_t(i)]);
    for (int y = 0; y < 32; ++y)
      for (int xx = 0; xx < 32; ++xx) {
        const float v = x[std::size_t(y * 32 + xx)];
        if (y < 2 || y >= 30 || xx < 2 || xx >= 30) {
          ASSERT_EQ(v, -1.0f) << "padding at " << i << " " << y << " " << xx;
          continue;
        }
        const int p = pixel(i, y - 2, xx - 2);
        ASSERT_EQ(v, float(p) / 127.5f - 1.0f) << i << " " << y << " " << xx;
        if (p == 0) {
          EXPECT_EQ(v, -1.0f);
          ++seen_min;
        }
        if (p == 255) {
          EXPECT_EQ(v, 1.0f);
          ++seen_max;
        }
      }
  }
  EXPECT_GT(seen_min, 0);
  EXPECT_GT(seen_max, 0);
  // The stored bytes are the raw pixels, centred.
  const h5::Array raw = h5::File::open_read(dir / "fm.h5").read("images", Shape{5, 1, 32, 32});
  EXPECT_EQ(raw.values[(4 * 32 + 2 + 7) * 32 + 2 + 11], pixel(4, 7, 11));
  EXPECT_EQ(dir.listing(), (std::vector<std::string>{"fm.h5", "train-images-idx3-ubyte.gz",
                                                     "train-labels-idx1-ubyte.gz"}));
}

TEST(PrepareFashion, BadIdxNamesTheFile) {
  TempDir dir;
  const std::string images = dir / "train-images-idx3-ubyte.gz";
  const std::string labels = dir / "train-labels-idx1-ubyte.gz";
  const std::string out = dir / "fm.h5";
  const std::string src = dir.path.string();
  EXPECT_ERROR_HAS(prepare_fashion_mnist(src, out, "train"), images, "cannot open");
  EXPECT_ERROR_HAS(prepare_fashion_mnist(src, out, "val"), "'val'", "'train' or 'test'");

  write_fashion(dir, 5, {1, 2, 3, 4, 5});
  write_gz(images, 0x801, {5, 28, 28}, std::vector<std::uint8_t>(5 * 784, 0));  // wrong magic
  EXPECT_ERROR_HAS(prepare_fashion_mnist(src, out, "train"), images, "bad IDX magic 0x00000801",
                   "expected 0x00000803");

  write_gz(images, 0x803, {5, 28, 28}, std::vector<std::uint8_t>(4 * 784, 0));  // 4 of 5 images
  EXPECT_ERROR_HAS(prepare_fashion_mnist(src, out, "train"), images, "truncated", "3920");

  write_gz(images, 0x803, {5, 28, 28}, std::vector<std::uint8_t>(5 * 784 + 1, 0));
  EXPECT_ERROR_HAS(prepare_fashion_mnist(src, out, "train"), images, "trailing data");

  write_gz(images, 0x803, {5, 28, 28}, std::vector<std::uint8_t>(5 * 784, 0));
  write_gz(labels, 0x801, {4}, {1, 2, 3, 4});  // count mismatch
  EXPECT_ERROR_HAS(prepare_fashion_mnist(src, out, "train"), labels, "4 labels", "5 images");

  write_gz(labels, 0x801, {5}, {1, 2, 3, 4, 10});
  EXPECT_ERROR_HAS(prepare_fashion_mnist(src, out, "train"), labels, "label[4] = 10");

  // A gzip stream cut in half.
  std::vector<std::uint8_t> noise(5 * 784);
  for (std::size_t i = 0; i < noise.size(); ++i) noise[i] = std::uint8_t((i * 7919) >> 3);
  write_gz(images, 0x803, {5, 28, 28}, noise);
  fs::resize_file(images, fs::file_size(images) / 2);
  EXPECT_ERROR_HAS(prepare_fashion_mnist(src, out, "train"), images);
  EXPECT_FALSE(fs::exists(out));
  EXPECT_EQ(dir.listing().size(), 2u);  // no output, no temporary left behind
}

TEST(PrepareFashion, RefusesToOverwrite) {
  TempDir dir;
  write_fashion(dir, 2, {7, 8});
  const std::string src = dir.path.string(), out = dir / "fm.h5";
  prepare_fashion_mnist(src, out, "train");
  EXPECT_ERROR_HAS(prepare_fashion_mnist(src, out, "train"), out, "already exists");
  write_fashion(dir, 3, {1, 2, 3});
  prepare_fashion_mnist(src, out, "train", Overwrite::Yes);
  EXPECT_EQ(H5Dataset(out).size(), 3);
  EXPECT_EQ(dir.listing().size(), 3u);
  EXPECT_ERROR_HAS(prepare_fashion_mnist(src, dir / "no/such/fm.h5", "train"), "does not exist");
}

TEST(PrepareFashion, RealTestSplit) {
  const std::string src = "/usr/share/datasets/fashion-mnist";
  if (!fs::exists(src + "/t10k-images-idx3-ubyte.gz"))
    GTEST_SKIP() << src << " is missing (apt-get install dataset-fashion-mnist)";
  TempDir dir;
  prepare_fashion_mnist(src, dir / "test.h5", "test");
  auto ds = open_dataset(dir / "test.h5");
  ASSERT_EQ(ds->size(), 10000);
  EXPECT_EQ(ds->num_classes(), 10);
  std::array<int, 10> histogram{};
  for (std::int64_t i = 0; i < ds->size(); ++i)
    ++histogram[std::size_t(dynamic_cast<H5Dataset&>(*ds).label(i))];
  for (int k = 0; k < 10; ++k) EXPECT_EQ(histogram[std::size_t(k)], 1000) << "class " << k;
  // Sample 0 (an ankle boot): label and pixel sum as read by Python's gzip from the IDX file.
  std::vector<float> x(32 * 32);
  EXPECT_EQ(ds->get(0, x.data()), 9);
  double sum = 0;
  for (float v : x) sum += std::lround((v + 1.0f) * 127.5f);
  EXPECT_EQ(sum, 33456);
}

// --- image folders
// --------------------------------------------------------------------------------

// A w x h image of `channels` with pixel(x, y, c) from f, as PNG.
void png_of(const std::string& path, int w, int h, int channels,
            const std::function<int(int, int, int)>& f) {
  std::vector<std::uint8_t> px;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < channels; ++c) px.push_back(std::uint8_t(f(x, y, c)));
  write_png(path, w, h, channels, px.data());
}

TEST(PrepareImages, ClassOrderCropAndResize) {
  TempDir dir;
  const fs::path root = dir.path / "imgs";
  fs::create_directories(root / "b_dogs");
  fs::create_directories(root / "a_cats");
  std::ofstream(root / "README.txt") << "not a class";
  std::ofstream(root / "a_cats" / "notes.txt") << "skipped";
  auto grad = [](int x, int y, int) { return 10 * (y * 4 + x); };  // 4x4, 2x2 means 25 45 105 125
  png_of((root / "a_cats" / "1.png").string(), 4, 4, 1, grad);
  png_of((root / "a_cats" / "2.png").string(), 3, 3, 1, [](int, int, int) { return 77; });
  // Wide 8x4: red | gradient | blue; the centre crop keeps the gradient only.
  png_of((root / "b_dogs" / "wide.png").string(), 8, 4, 3, [&](int x, int y, int c) {
    if (x < 2) return c == 0 ? 255 : 0;
    if (x >= 6) return c == 2 ? 255 : 0;
    return c == 0 ? grad(x - 2, y, 0) : c == 1 ? 200 : 7;
  });
  // Tall 2x6: white above and below, rows 2-3 kept as they are (2 -> 2 is the identity).
  png_of((root / "b_dogs" / "tall.png").string(), 2, 6, 3,
         [](int x, int y, int c) { return y < 2 || y >= 4 ? 255 : 40 * x + 20 * y + c; });
  std::vector<std::uint8_t> grey(8 * 8 * 3, 128);
  ASSERT_NE(stbi_write_jpg((root / "b_dogs" / "z.jpg").string().c_str(), 8, 8, 3, grey.data(), 95),
            0);

  const std::string out = dir / "imgs.h5";
  const PrepareResult r = prepare_images(root.string(), out, 2);
  EXPECT_EQ(r.samples, 5);
  H5Dataset ds(out);
  ASSERT_EQ(ds.size(), 5);
  EXPECT_EQ(ds.num_classes(), 2);
  EXPECT_EQ(ds.shape().channels, 3);
  EXPECT_EQ(ds.shape().height, 2);
  EXPECT_EQ(ds.shape().width, 2);
  EXPECT_EQ(ds.class_names(), (std::vector<std::string>{"a_cats", "b_dogs"}));
  EXPECT_EQ(ds.source(), "image folder " + root.string());
  const std::vector<int> want_labels = {0, 0, 1, 1, 1};  // 1.png 2.png tall.png wide.png z.jpg
  for (int i = 0; i < 5; ++i) EXPECT_EQ(ds.label(i), want_labels[std::size_t(i)]);

  const h5::Array raw = h5::File::open_read(out).read("images", Shape{5, 3, 2, 2});
  auto at = [&](int i, int c, int y, int x) {
    return raw.values[std::size_t(((i * 3 + c) * 2 + y) * 2 + x)];
  };
  const int box[2][2] = {{25, 45}, {105, 125}};
  for (int y = 0; y < 2; ++y)
    for (int x = 0; x < 2; ++x) {
      for (int c = 0; c < 3; ++c) {
        EXPECT_EQ(at(0, c, y, x), box[y][x]) << "grey is replicated to RGB";
        EXPECT_EQ(at(1, c, y, x), 77) << "3 -> 2 area weights sum to one";
        EXPECT_EQ(at(2, c, y, x), 40 * x + 20 * (y + 2) + c) << "tall crop";
        EXPECT_NEAR(at(4, c, y, x), 128, 3) << "jpeg";
      }
      EXPECT_EQ(at(3, 0, y, x), box[y][x]) << "wide crop";
      EXPECT_EQ(at(3, 1, y, x), 200);
      EXPECT_EQ(at(3, 2, y, x), 7);
    }
}

TEST(PrepareImages, Errors) {
  TempDir dir;
  const fs::path root = dir.path / "imgs";
  fs::create_directories(root);
  const std::string out = dir / "imgs.h5";
  EXPECT_ERROR_HAS(prepare_images(root.string(), out, 8), root.string(), "no class sub-folders");
  fs::create_directories(root / "a");
  fs::create_directories(root / "b");
  std::ofstream(root / "a" / "x.txt") << "text";
  EXPECT_ERROR_HAS(prepare_images(root.string(), out, 8), "no images at all");
  png_of((root / "a" / "1.png").string(), 2, 2, 1, [](int, int, int) { return 1; });
  EXPECT_ERROR_HAS(prepare_images(root.string(), out, 8), (root / "b").string(), "holds no");
  std::ofstream(root / "b" / "bad.png") << "not a png at all";
  EXPECT_ERROR_HAS(prepare_images(root.string(), out, 8), (root / "b" / "bad.png").string(),
                   "cannot read image");
  EXPECT_EQ(dir.listing(), std::vector<std::string>{"imgs"});  // the temporary file is gone
  EXPECT_ERROR_HAS(prepare_images((dir.path / "nope").string(), out, 8), "not a folder");
}

// --- .npy latents
// ---------------------------------------------------------------------------------

void write_npy(const std::string& path, const std::string& descr, const std::string& shape,
               const void* data, std::size_t bytes, int version = 1) {
  std::string header =
      "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  const std::size_t prefix = version == 1 ? 10 : 12;
  while ((prefix + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::ofstream f(path, std::ios::binary);
  f.write("\x93NUMPY", 6);
  f.put(char(version));
  f.put(0);
  const std::size_t n = header.size();
  f.put(char(n & 0xff));
  f.put(char(n >> 8));
  if (version != 1) f.put(0), f.put(0);
  f << header;
  f.write(static_cast<const char*>(data), std::streamsize(bytes));
}

float latent(int i, int k) { return float(i) + 0.25f * float(k) - 1.0f; }

// n features (1, 4, 2, 3) and int64 labels.
void write_latents(const TempDir& dir, const std::vector<std::int64_t>& labels) {
  fs::create_directories(dir.path / "f");
  fs::create_directories(dir.path / "y");
  for (std::size_t i = 0; i < labels.size(); ++i) {
    std::vector<float> x(24);
    for (int k = 0; k < 24; ++k) x[std::size_t(k)] = latent(int(i), k);
    write_npy(dir / ("f/" + std::to_string(i) + ".npy"), "<f4", "(1, 4, 2, 3)", x.data(), 96,
              i == 1 ? 2 : 1);
    write_npy(dir / ("y/" + std::to_string(i) + ".npy"), "<i8", "(1,)", &labels[i], 8);
  }
}

TEST(PrepareLatents, RoundTripAndScale) {
  TempDir dir;
  write_latents(dir, {2, 0, 5});
  const PrepareResult r = prepare_latents(dir / "f", dir / "y", dir / "lat.h5", 0.5);
  EXPECT_EQ(r.num_classes, 6);
  H5Dataset ds(dir / "lat.h5");
  ASSERT_EQ(ds.size(), 3);
  EXPECT_EQ(ds.kind(), "latents");
  EXPECT_EQ(ds.shape().channels, 4);
  EXPECT_EQ(ds.shape().height, 2);
  EXPECT_EQ(ds.shape().width, 3);
  EXPECT_EQ(ds.latent_scale(), 0.5);
  std::vector<float> x(24);
  const int want[3] = {2, 0, 5};
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(ds.get(i, x.data()), want[i]);
    for (int k = 0; k < 24; ++k) ASSERT_EQ(x[std::size_t(k)], latent(i, k) * 0.5f);
  }
  H5Dataset over(dir / "lat.h5", 0.25);
  over.get(2, x.data());
  EXPECT_EQ(x[5], latent(2, 5) * 0.25f);

  // int32 labels and a given class count.
  const std::int32_t y32 = 1;
  write_npy(dir / "y/1.npy", "<i4", "(1,)", &y32, 4);
  prepare_latents(dir / "f", dir / "y", dir / "lat.h5", 0.18215, Overwrite::Yes, 1000);
  H5Dataset ds2(dir / "lat.h5");
  EXPECT_EQ(ds2.num_classes(), 1000);
  EXPECT_EQ(ds2.label(1), 1);
  EXPECT_NEAR(ds2.latent_scale(), 0.18215, 1e-12);
}

TEST(PrepareLatents, ErrorsNameTheFile) {
  TempDir dir;
  write_latents(dir, {1, 2, 3, 4});
  const std::string f = dir / "f", y = dir / "y", out = dir / "lat.h5";
  EXPECT_ERROR_HAS(prepare_latents(f, y, out, 0.5, Overwrite::No, 3), dir / "y/2.npy", "label 3");
  const std::vector<float> x(24, 0.0f);
  write_npy(dir / "f/1.npy", "<f4", "(1, 4, 2, 2)", x.data(), 64);
  EXPECT_ERROR_HAS(prepare_latents(f, y, out, 0.5), dir / "f/1.npy", "shape (1, 4, 2, 2)");
  const std::vector<double> x64(24, 0.0);
  write_npy(dir / "f/1.npy", "<f8", "(1, 4, 2, 3)", x64.data(), 192);
  EXPECT_ERROR_HAS(prepare_latents(f, y, out, 0.5), dir / "f/1.npy", "'<f4'");
  write_npy(dir / "f/1.npy", "<f4", "(1, 4, 2, 3)", x.data(), 90);
  EXPECT_ERROR_HAS(prepare_latents(f, y, out, 0.5), dir / "f/1.npy", "90 bytes of data");
  std::ofstream(dir / "f/1.npy") << "NUMPY? no";
  EXPECT_ERROR_HAS(prepare_latents(f, y, out, 0.5), dir / "f/1.npy", "not a .npy");
  fs::remove(dir / "f/2.npy");
  EXPECT_ERROR_HAS(prepare_latents(f, y, out, 0.5), dir / "f/2.npy", "missing");
  write_npy(dir / "f/2.npy", "<f4", "(1, 4, 2, 3)", x.data(), 96);
  fs::remove(dir / "y/3.npy");
  EXPECT_ERROR_HAS(prepare_latents(f, y, out, 0.5), y, "3 label files", "4 feature files");
  EXPECT_ERROR_HAS(prepare_latents(f, y, out, 0.0), "latent scale 0");
  EXPECT_FALSE(fs::exists(out));
}

// --- H5Dataset schema checks
// ------------------------------------------------------------------------

struct H5Spec {
  std::vector<hsize_t> image_dims = {4, 1, 2, 2};
  hid_t image_type = H5T_STD_U8LE;
  bool images = true, labels = true;
  hid_t label_type = H5T_STD_I64LE;
  std::vector<std::int64_t> label_values = {0, 1, 2, 1};
  bool has_num_classes = true;
  std::int64_t num_classes = 3;
  std::string kind;  // empty: no attribute
};

// Made by hand (as with h5py), then sealed as tools/dit_checkpoint.py seal does (io/sealed_h5.h).
void write_h5(const std::string& path, const H5Spec& s) {
  const hid_t fcpl = h5::sealed_fcpl();
  hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, fcpl, H5P_DEFAULT);
  H5Pclose(fcpl);
  ASSERT_GE(f, 0);
  if (s.images) {
    hid_t sp = H5Screate_simple(int(s.image_dims.size()), s.image_dims.data(), nullptr);
    hid_t d = H5Dcreate2(f, "images", s.image_type, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t n = 1;
    for (auto v : s.image_dims) n *= v;
    std::vector<double> v(n);
    for (hsize_t i = 0; i < n; ++i) v[i] = double(i % 200);
    H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
    H5Dclose(d);
    H5Sclose(sp);
  }
  if (s.labels) {
    const hsize_t n = s.label_values.size();
    hid_t sp = H5Screate_simple(1, &n, nullptr);
    hid_t d = H5Dcreate2(f, "labels", s.label_type, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, s.label_values.data());
    H5Dclose(d);
    H5Sclose(sp);
  }
  hid_t scalar = H5Screate(H5S_SCALAR);
  if (s.has_num_classes) {
    hid_t a = H5Acreate2(f, "num_classes", H5T_STD_I32LE, scalar, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_INT64, &s.num_classes);
    H5Aclose(a);
  }
  if (!s.kind.empty()) {
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, s.kind.size());
    hid_t a = H5Acreate2(f, "kind", t, scalar, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, t, s.kind.c_str());
    H5Aclose(a);
    H5Tclose(t);
  }
  H5Sclose(scalar);
  H5Fclose(f);
  h5::seal_file(path);
}

TEST(DataSchema, HandMadeFileOpens) {
  TempDir dir;
  write_h5(dir / "ok.h5", H5Spec{});  // int64 labels, no kind/source: inferred
  auto ds = open_dataset(dir / "ok.h5");
  EXPECT_EQ(ds->size(), 4);
  EXPECT_EQ(ds->num_classes(), 3);
  std::vector<float> x(4);
  EXPECT_EQ(ds->get(3, x.data()), 1);
  EXPECT_EQ(x[0], 12.0f / 127.5f - 1.0f);
  EXPECT_NE(ds->describe().find("4 images of 1x2x2, 3 classes"), std::string::npos)
      << ds->describe();
  EXPECT_ERROR_HAS(ds->get(4, x.data()), "sample 4 outside [0, 4)");
}

// Unsealed or damaged files are refused before HDF5 parses them.
TEST(DataSchema, UnsealedOrDamagedFilesAreRefusedFirst) {
  TempDir dir;
  const std::string p = dir / "plain.h5";
  hid_t f = H5Fcreate(p.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  H5Fclose(f);
  EXPECT_ERROR_HAS(open_dataset(p), "plain.h5: no dit_mp seal");
  write_h5(p, H5Spec{});
  std::fstream io(p, std::ios::in | std::ios::out | std::ios::binary);
  io.seekp(600);
  io.put('\x5a');
  io.close();
  EXPECT_ERROR_HAS(open_dataset(p), "plain.h5: its contents do not match the CRC-32 in its seal");
}

TEST(DataSchema, BadFilesNameFileObjectAndExpectation) {
  TempDir dir;
  const std::string p = dir / "bad.h5";
  auto expect = [&](const H5Spec& s, std::vector<std::string> fragments) {
    write_h5(p, s);
    const std::string msg = error_of([&] { H5Dataset ds(p); });
    EXPECT_NE(msg.find(p), std::string::npos) << msg;
    for (const auto& frag : fragments) EXPECT_NE(msg.find(frag), std::string::npos) << msg;
  };
  H5Spec s;
  s.labels = false;
  expect(s, {"dataset 'labels' is missing"});
  s = {};
  s.images = false;
  expect(s, {"dataset 'images' is missing"});
  s = {};
  s.label_values = {0, 1, 3, 1};
  expect(s, {"labels[2] = 3 is outside [0, num_classes = 3)"});
  s.label_values = {0, -1, 0, 1};
  expect(s, {"labels[1] = -1 is outside"});
  s = {};
  s.image_dims = {4, 2, 2};
  expect(s, {"dataset 'images' has rank 3, expected 4 (N, C, H, W)"});
  s = {};
  s.image_type = H5T_IEEE_F64LE;
  expect(s, {"dataset 'images' holds float64, expected uint8 (images) or float32 (latents)"});
  s = {};
  s.label_values = {0, 1, 2};
  expect(s, {"dataset 'labels' has 3 entries but 'images' has 4 samples"});
  s = {};
  s.label_type = H5T_IEEE_F32LE;
  expect(s, {"dataset 'labels' holds float32, expected integers"});
  s = {};
  s.has_num_classes = false;
  expect(s, {"attribute 'num_classes' is missing"});
  s.has_num_classes = true;
  s.num_classes = 0;
  expect(s, {"'num_classes' = 0, expected an integer >= 1"});
  s = {};
  s.kind = "latents";
  expect(s, {"attribute 'kind' = 'latents'", "expected float32"});
  s.kind = "pictures";
  expect(s, {"'pictures', expected 'images' or 'latents'"});
  std::ofstream(p) << "plain text";
  EXPECT_ERROR_HAS(H5Dataset ds(p), p, "not an HDF5 file");
}

// --- PNG
// ------------------------------------------------------------------------------------------------

TEST(Png, WriteAndReadBackExactly) {
  TempDir dir;
  for (int channels : {1, 3}) {
    const int w = 5, h = 3;
    std::vector<std::uint8_t> px(std::size_t(w * h * channels));
    for (std::size_t i = 0; i < px.size(); ++i) px[i] = std::uint8_t(i * 17 + 3);
    const std::string path = dir / ("p" + std::to_string(channels) + ".png");
    write_png(path, w, h, channels, px.data());
    int rw = 0, rh = 0, rc = 0;
    stbi_uc* back = stbi_load(path.c_str(), &rw, &rh, &rc, 0);
    ASSERT_NE(back, nullptr) << stbi_failure_reason();
    EXPECT_EQ(rw, w);
    EXPECT_EQ(rh, h);
    EXPECT_EQ(rc, channels);
    EXPECT_EQ(std::vector<std::uint8_t>(back, back + px.size()), px);
    stbi_image_free(back);
  }
  EXPECT_EQ(dir.listing(), (std::vector<std::string>{"p1.png", "p3.png"}));
  const std::uint8_t one[4] = {0, 0, 0, 0};
  EXPECT_ERROR_HAS(write_png(dir / "x.png", 1, 1, 2, one), "2 channels", "1 (grey) or 3 (RGB)");
  EXPECT_ERROR_HAS(write_png(dir / "no/x.png", 1, 1, 1, one), "PNG " + (dir / "no/x.png"), "cannot write (",
                   "does not exist");
}

TEST(Png, MakeGridLayoutAndRounding) {
  // 3 grey 2x3 images on a 2x2 grid, padding 1: 9 x 7 pixels, cell 4 empty.
  const std::vector<float> vals = {-1, 1, 0, 2, -5, 0.5f};  // -> 0 255 128 255 0 191
  const std::vector<int> want = {0, 255, 128, 255, 0, 191};
  std::vector<float> x(3 * 6);
  for (int i = 0; i < 3; ++i)
    for (int k = 0; k < 6; ++k)
      x[std::size_t(i * 6 + k)] = i == 1 ? vals[std::size_t(5 - k)] : vals[std::size_t(k)];
  const Grid g = make_grid(Tensor{x.data(), DType::F32, Shape{3, 1, 2, 3}}, 2, 2, 1);
  ASSERT_EQ(g.width, 9);
  ASSERT_EQ(g.height, 7);
  ASSERT_EQ(g.channels, 1);
  for (int y = 0; y < 7; ++y)
    for (int xx = 0; xx < 9; ++xx) {
      int expect = 0;  // padding and the empty cell
      const int cy = (y - 1) / 3, cx = (xx - 1) / 4, iy = (y - 1) % 3, ix = (xx - 1) % 4;
      const int i = cy * 2 + cx;
      if (y >= 1 && xx >= 1 && iy < 2 && ix < 3 && i < 3) {
        const int k = iy * 3 + ix;
        expect = want[std::size_t(i == 1 ? 5 - k : k)];
      }
      EXPECT_EQ(g.pixels[std::size_t(y * 9 + xx)], expect) << "at " << xx << ", " << y;
    }
  // RGB is interleaved per pixel.
  const float rgb[6] = {-1, 1, 1, -1, 1, -1};  // (1, 3, 1, 2): R = (0, 255), G = (255, 0), B = ...
  const Grid c = make_grid(Tensor{const_cast<float*>(rgb), DType::F32, Shape{1, 3, 1, 2}}, 1, 1, 0);
  EXPECT_EQ(c.pixels, (std::vector<std::uint8_t>{0, 255, 255, 255, 0, 0}));

  std::vector<float> lat(4 * 4, 0.0f);
  EXPECT_ERROR_HAS(make_grid(Tensor{lat.data(), DType::F32, Shape{1, 4, 2, 2}}, 1, 1, 0),
                   "4 channels", "latents");
  EXPECT_ERROR_HAS(make_grid(Tensor{x.data(), DType::F32, Shape{3, 1, 2, 3}}, 1, 2, 0),
                   "3 images do not fit a 1x2 grid");
  x[4] = NAN;
  EXPECT_ERROR_HAS(make_grid(Tensor{x.data(), DType::F32, Shape{3, 1, 2, 3}}, 2, 2, 0), "NaN");
}

}  // namespace
}  // namespace dit
