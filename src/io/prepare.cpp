// Dataset-file writers (see prepare.h): readers for IDX gz, image folders (stb_image) and .npy
// files; io/dataset_writer.h lays out the HDF5 schema of h5_dataset.h in the temporary file of the
// atomic writer (io/atomic_file.h), which renames the finished file into place.
#include "io/prepare.h"

#include <hdf5.h>
#include <stb/stb_image.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <vector>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/dataset_writer.h"
#include "io/h5.h"
#include "io/h5_dataset.h"
#include "io/image_prep.h"
#include "io/file_safety.h"

namespace dit {
namespace {

namespace fs = std::filesystem;

constexpr const char* kWhat = "dataset";

// Checked before any input is read: an existing file (unless replaced), a folder, a missing folder.
void check_target(const std::string& out, Overwrite overwrite) {
  check_writable_target(out, kWhat);
  DIT_CHECK(overwrite == Overwrite::Yes || !fs::exists(out), out,
            ": already exists; pass overwrite to replace it");
}

// --- IDX (gz) ----------------------------------------------------------------------------------

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzPtr = std::unique_ptr<gzFile_s, GzCloser>;

// Reads up to n bytes (fewer only at the end of the stream); a zlib error throws.
std::size_t gz_read(gzFile f, void* buf, std::size_t n, const std::string& path) {
  std::size_t got = 0;
  while (got < n) {
    const unsigned chunk = unsigned(std::min<std::size_t>(n - got, std::size_t(1) << 30));
    const int r = gzread(f, static_cast<char*>(buf) + got, chunk);
    int code = 0;
    const char* msg = gzerror(f, &code);
    DIT_CHECK(r >= 0 && (code == Z_OK || code == Z_BUF_ERROR || code == Z_STREAM_END), path,
              ": cannot decompress (", msg, ")");
    if (r == 0) break;
    got += std::size_t(r);
  }
  return got;
}

struct Idx {
  std::vector<std::uint32_t> dims;
  std::vector<std::uint8_t> data;
};

// An IDX file of unsigned bytes: big-endian magic 0x000008<ndims>, then ndims big-endian sizes.
Idx read_idx(const std::string& path, int ndims, const char* what) {
  GzPtr f(gzopen(path.c_str(), "rb"));
  DIT_CHECK(f != nullptr, path, ": cannot open (", std::strerror(errno), ")");
  std::uint8_t head[4 + 4 * 3] = {0};
  const std::size_t head_bytes = std::size_t(4 + 4 * ndims);
  DIT_CHECK(gz_read(f.get(), head, head_bytes, path) == head_bytes, path,
            ": truncated IDX header, expected ", head_bytes, " bytes");
  auto be32 = [&](int i) {
    return std::uint32_t(head[i]) << 24 | std::uint32_t(head[i + 1]) << 16 |
           std::uint32_t(head[i + 2]) << 8 | std::uint32_t(head[i + 3]);
  };
  const std::uint32_t magic = be32(0), expected = 0x800u + std::uint32_t(ndims);
  char hex[2][16];
  std::snprintf(hex[0], sizeof hex[0], "0x%08x", magic);
  std::snprintf(hex[1], sizeof hex[1], "0x%08x", expected);
  DIT_CHECK(magic == expected, path, ": bad IDX magic ", hex[0], ", expected ", hex[1], " (", what,
            ")");
  Idx idx;
  std::uint64_t total = 1;
  for (int i = 0; i < ndims; ++i) {
    idx.dims.push_back(be32(4 + 4 * i));
    total *= idx.dims.back();
  }
  // Checked before allocating: the header is untrusted. 256 MiB is 5x the MNIST train split.
  DIT_CHECK(total <= (std::uint64_t(1) << 28), path, ": IDX sizes claim ", total,
            " bytes, more than any MNIST-style split (expected at most 2^28)");
  idx.data.resize(std::size_t(total));
  const std::size_t got = gz_read(f.get(), idx.data.data(), idx.data.size(), path);
  DIT_CHECK(got == idx.data.size(), path, ": truncated: the header promises ", total,
            " bytes of data, the file holds ", got);
  std::uint8_t extra = 0;
  DIT_CHECK(gz_read(f.get(), &extra, 1, path) == 0, path, ": trailing data after the ", total,
            " bytes the header promises");
  return idx;
}

}  // namespace

PrepareResult prepare_fashion_mnist(const std::string& src_dir, const std::string& out_path,
                                    const std::string& split, Overwrite overwrite) {
  DIT_CHECK(split == "train" || split == "test", "fashion-mnist split '", split,
            "', expected 'train' or 'test'");
  check_target(out_path, overwrite);
  const std::string stem = (fs::path(src_dir) / (split == "train" ? "train" : "t10k")).string();
  const std::string images_path = stem + "-images-idx3-ubyte.gz";
  const std::string labels_path = stem + "-labels-idx1-ubyte.gz";
  const Idx images = read_idx(images_path, 3, "an IDX images file");
  const Idx labels = read_idx(labels_path, 1, "an IDX labels file");
  const std::uint32_t n = images.dims[0];
  DIT_CHECK(images.dims[1] == 28 && images.dims[2] == 28, images_path, ": images are ",
            images.dims[1], "x", images.dims[2], ", expected 28x28");
  DIT_CHECK(n >= 1, images_path, ": holds no images");
  DIT_CHECK(labels.dims[0] == n, labels_path, ": holds ", labels.dims[0], " labels but ",
            images_path, " holds ", n, " images, expected equal counts");
  std::vector<std::int32_t> y(n);
  for (std::uint32_t i = 0; i < n; ++i) {
    DIT_CHECK(labels.data[i] < 10, labels_path, ": label[", i, "] = ", int(labels.data[i]),
              ", expected 0..9");
    y[i] = labels.data[i];
  }
  // Centre each 28x28 image on a 32x32 zero canvas (2 pixels each side).
  std::vector<std::uint8_t> padded(std::size_t(n) * 32 * 32, 0);
  for (std::size_t i = 0; i < n; ++i)
    for (int r = 0; r < 28; ++r)
      std::memcpy(&padded[(i * 32 + r + 2) * 32 + 2], &images.data[(i * 28 + r) * 28], 28);
  write_atomically(out_path, kWhat, [&](const std::string& tmp) {
    DatasetWriter writer(tmp, DatasetLayout{n, 1, 32, 32, false});
    writer.write(0, n, padded.data());
    writer.finish(y, 10, "fashion-mnist " + split);
  });
  return PrepareResult{out_path, n, 10};
}

// --- image folders -------------------------------------------------------------------------------

namespace {

bool is_image_file(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char ch) { return std::tolower(ch); });
  return ext == ".png" || ext == ".jpg" || ext == ".jpeg";
}

// Area-average weights: output o covers source [o * s, (o + 1) * s), s = src / dst.
struct Tap {
  int index;
  float weight;
};
std::vector<std::vector<Tap>> area_weights(int src, int dst) {
  std::vector<std::vector<Tap>> taps(static_cast<std::size_t>(dst));
  const double s = double(src) / dst;
  for (int o = 0; o < dst; ++o) {
    const double lo = o * s, hi = (o + 1) * s;
    for (int i = int(std::floor(lo)); i < std::min(src, int(std::ceil(hi))); ++i) {
      const double overlap = std::min<double>(i + 1, hi) - std::max<double>(i, lo);
      if (overlap > 1e-12) taps[std::size_t(o)].push_back({i, float(overlap / s)});
    }
  }
  return taps;
}

// Decodes one image to RGB, centre-crops a square and resizes it to (3, size, size) uint8.
void load_square(const std::string& path, int size, std::uint8_t* out) {
  const std::string why = not_a_regular_file(path);
  DIT_CHECK(why.empty(), path, ": ", why, "; remove it or point it at a picture");
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  DIT_CHECK(in, path, ": cannot read image (", std::strerror(errno), ")");
  const std::string bytes = text.str();
  const std::string too_large = image_size_problem(bytes);  // the reason the VAE's path gives too
  DIT_CHECK(too_large.empty(), path, ": cannot read image (", too_large, ")");
  DIT_CHECK(bytes.size() <= std::size_t(INT32_MAX), path, ": cannot read image (", bytes.size(),
            " bytes, at most 2 GiB)");
  int w = 0, h = 0;
  const std::vector<std::uint8_t> rgb =  // as PIL's convert("RGB") (a 16-bit grey PNG clipped at 255)
      decode_rgb8(reinterpret_cast<const unsigned char*>(bytes.data()), int(bytes.size()), w, h);
  DIT_CHECK(!rgb.empty(), path, ": cannot read image (", stbi_failure_reason(), ")");
  const int side = std::min(w, h), x0 = (w - side) / 2, y0 = (h - side) / 2;
  const auto taps = area_weights(side, size);
  std::vector<float> rows(std::size_t(side) * size * 3, 0.0f);  // (side, size, 3): x resized
  for (int y = 0; y < side; ++y)
    for (int ox = 0; ox < size; ++ox)
      for (const Tap& t : taps[std::size_t(ox)])
        for (int c = 0; c < 3; ++c)
          rows[(std::size_t(y) * size + ox) * 3 + c] +=
              t.weight * rgb[(std::size_t(y0 + y) * w + x0 + t.index) * 3 + c];
  for (int oy = 0; oy < size; ++oy)
    for (int ox = 0; ox < size; ++ox)
      for (int c = 0; c < 3; ++c) {
        float v = 0;
        for (const Tap& t : taps[std::size_t(oy)])
          v += t.weight * rows[(std::size_t(t.index) * size + ox) * 3 + c];
        out[(std::size_t(c) * size + oy) * size + ox] =
            std::uint8_t(std::clamp(std::floor(v + 0.5f), 0.0f, 255.0f));
      }
}

}  // namespace

namespace {

// What an entry of an image folder is, following symbolic links; a link that cannot be followed
// (a loop, a chain too long) is named in the usual form rather than with std::filesystem's text.
fs::file_status entry_status(const fs::path& p) {
  std::error_code ec;
  const fs::file_status st = fs::status(p, ec);
  if (ec == std::errc::too_many_symbolic_link_levels)
    DIT_FAIL(p.string(), ": a symbolic link loop (following it never reaches a file or folder); remove it or "
             "point it at a class folder or an image");
  DIT_CHECK(!ec || ec == std::errc::no_such_file_or_directory, p.string(), ": cannot be read (", ec.message(), ")");
  return st;  // a dangling link: not found, skipped as other non-images are
}

}  // namespace

ImageFolder list_image_folder(const std::string& dir) {
  DIT_CHECK(fs::is_directory(entry_status(dir)), dir, ": not a folder");
  ImageFolder f;
  for (const auto& e : fs::directory_iterator(dir))
    if (fs::is_directory(entry_status(e.path())) && e.path().filename().string()[0] != '.')  // skip .git, .cache, ...
      f.classes.push_back(e.path().filename().string());
  std::sort(f.classes.begin(), f.classes.end());
  DIT_CHECK(!f.classes.empty(), dir, ": no class sub-folders, expected one folder of images per class");
  std::vector<std::size_t> per_class(f.classes.size(), 0);
  for (std::size_t k = 0; k < f.classes.size(); ++k) {
    std::vector<std::string> found;
    for (const auto& e : fs::directory_iterator(fs::path(dir) / f.classes[k]))
      // A picture's name that is no regular file (a dangling link, a FIFO) is listed: its reader
      // names it (refused, or with --bad-files skip, left out and counted), never left out unsaid.
      if (is_image_file(e.path()) && !fs::is_directory(entry_status(e.path()))) found.push_back(e.path().string());
    std::sort(found.begin(), found.end());
    per_class[k] = found.size();
    for (auto& file : found) {
      f.files.push_back(std::move(file));
      f.labels.push_back(std::int32_t(k));
    }
  }
  DIT_CHECK(!f.files.empty(), dir, ": no images at all (.png/.jpg/.jpeg) in ", f.classes.size(), " class folders");
  for (std::size_t k = 0; k < f.classes.size(); ++k)
    DIT_CHECK(per_class[k] > 0, (fs::path(dir) / f.classes[k]).string(),
              ": class folder holds no .png/.jpg/.jpeg images");
  return f;
}

PrepareResult prepare_images(const std::string& dir, const std::string& out_path, int size,
                             Overwrite overwrite) {
  DIT_CHECK(size >= 1 && size <= 4096, "image size ", size, ", expected 1..4096");
  DIT_CHECK(fs::is_directory(entry_status(dir)), dir, ": not a folder");
  check_target(out_path, overwrite);
  const ImageFolder folder = list_image_folder(dir);
  const std::vector<std::string>& classes = folder.classes;
  const std::vector<std::string>& files = folder.files;
  const std::vector<std::int32_t>& labels = folder.labels;
  const std::int64_t n = std::int64_t(files.size());
  DatasetLayout layout{n, 3, size, size, false};
  layout.text_bytes = dir.size() + 64;
  for (const std::string& name : classes) layout.text_bytes += name.size() + 32;
  write_atomically(out_path, kWhat, [&](const std::string& tmp) {
    DatasetWriter writer(tmp, layout);
    const std::int64_t sample = 3 * std::int64_t(size) * size;
    const std::int64_t batch = std::max<std::int64_t>(1, (std::int64_t(64) << 20) / sample);
    std::vector<std::uint8_t> buf(std::size_t(std::min(batch, n) * sample));
    for (std::int64_t first = 0; first < n; first += batch) {
      const std::int64_t count = std::min(batch, n - first);
      for (std::int64_t i = 0; i < count; ++i)
        load_square(files[std::size_t(first + i)], size, &buf[std::size_t(i * sample)]);
      writer.write(first, count, buf.data());
    }
    write_dataset_attr_strings(writer.file(), "class_names", classes, h5::AttrShape::List, tmp);
    writer.finish(labels, int(classes.size()), "image folder " + dir);
  });
  return PrepareResult{out_path, n, int(classes.size())};
}

// --- .npy latents --------------------------------------------------------------------------------

namespace {

struct Npy {
  std::string descr;
  std::vector<std::int64_t> shape;
  std::vector<char> data;  // little-endian payload, C order
  std::int64_t numel() const {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
  }
};

// The value text after 'key': in a .npy header dict such as
// {'descr': '<f4', 'fortran_order': False, 'shape': (1, 4, 32, 32), }
std::string npy_field(const std::string& header, const std::string& key, const std::string& path) {
  std::size_t at = header.find("'" + key + "'");
  if (at == std::string::npos) at = header.find("\"" + key + "\"");
  DIT_CHECK(at != std::string::npos, path, ": .npy header lacks '", key, "': ", header);
  at = header.find(':', at);
  if (at != std::string::npos) at = header.find_first_not_of(' ', at + 1);
  DIT_CHECK(at != std::string::npos, path, ": malformed .npy header: ", header);
  const char open = header[at];
  const bool quoted = open == '\'' || open == '"';
  const std::size_t begin = quoted || open == '(' ? at + 1 : at;
  const std::size_t end = quoted        ? header.find(open, begin)
                          : open == '(' ? header.find(')', begin)
                                        : header.find_first_of(", }", begin);
  DIT_CHECK(end != std::string::npos, path, ": malformed .npy header: ", header);
  return header.substr(begin, end - begin);
}

Npy read_npy(const std::string& path) {
  require_regular(path, "the .npy file");
  std::ifstream in(path, std::ios::binary);
  DIT_CHECK(in.good(), path, ": cannot open");
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                                std::istreambuf_iterator<char>());
  DIT_CHECK(bytes.size() >= 10 && std::memcmp(bytes.data(), "\x93NUMPY", 6) == 0, path,
            ": not a .npy file (expected the magic \\x93NUMPY)");
  const int major = static_cast<unsigned char>(bytes[6]);
  DIT_CHECK(major >= 1 && major <= 3, path, ": .npy version ", major, ", expected 1, 2 or 3");
  auto byte = [&](std::size_t i) { return std::size_t(static_cast<unsigned char>(bytes[i])); };
  const std::size_t prefix = major == 1 ? 10 : 12;
  DIT_CHECK(bytes.size() >= prefix, path, ": truncated .npy header");
  const std::size_t header_len = major == 1
                                     ? byte(8) | byte(9) << 8
                                     : byte(8) | byte(9) << 8 | byte(10) << 16 | byte(11) << 24;
  DIT_CHECK(bytes.size() >= prefix + header_len, path, ": truncated .npy header");
  const std::string header(bytes.data() + prefix, header_len);
  Npy npy;
  npy.descr = npy_field(header, "descr", path);
  DIT_CHECK(npy_field(header, "fortran_order", path) == "False", path,
            ": fortran_order arrays are not supported, expected fortran_order False");
  const std::string shape = npy_field(header, "shape", path);
  for (std::size_t at = 0; at < shape.size();) {
    const std::size_t digit = shape.find_first_of("0123456789", at);
    if (digit == std::string::npos) break;
    std::size_t end = shape.find_first_not_of("0123456789", digit);
    if (end == std::string::npos) end = shape.size();
    DIT_CHECK(end - digit <= 12, path, ": implausible .npy shape (", shape, ")");
    npy.shape.push_back(std::stoll(shape.substr(digit, end - digit)));
    DIT_CHECK(npy.numel() <= (std::int64_t(1) << 30), path, ": implausible .npy shape (", shape,
              ")");
    at = end;
  }
  // descr is byte order + kind + item size: '<f4', '<i8', '|u1'.
  const std::string bits = npy.descr.size() >= 3 ? npy.descr.substr(2) : "";
  DIT_CHECK(!bits.empty() && bits.size() <= 2 &&
                bits.find_first_not_of("0123456789") == std::string::npos,
            path, ": unsupported .npy dtype '", npy.descr, "'");
  const std::size_t item = std::size_t(std::stoi(bits));
  const std::size_t want = std::size_t(npy.numel()) * item;
  DIT_CHECK(bytes.size() - prefix - header_len == want, path, ": holds ",
            bytes.size() - prefix - header_len, " bytes of data, expected ", want, " for ",
            npy.descr, " of shape (", shape, ")");
  npy.data.assign(bytes.begin() + std::ptrdiff_t(prefix + header_len), bytes.end());
  return npy;
}

std::string shape_str(const std::vector<std::int64_t>& s) {
  std::string out = "(";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + (s.size() == 1 ? ",)" : ")");
}

// Counts <i>.npy files (i a decimal without leading zeros) and checks they are 0..N-1.
std::int64_t count_indexed(const std::string& dir) {
  DIT_CHECK(fs::is_directory(dir), dir, ": not a folder");
  std::vector<std::int64_t> found;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.size() < 5 || name.substr(name.size() - 4) != ".npy") continue;
    const std::string stem = name.substr(0, name.size() - 4);
    if (stem.size() > 12 || stem.find_first_not_of("0123456789") != std::string::npos ||
        (stem.size() > 1 && stem[0] == '0'))
      continue;
    found.push_back(std::stoll(stem));
  }
  DIT_CHECK(!found.empty(), dir, ": holds no <i>.npy files");
  std::sort(found.begin(), found.end());
  for (std::size_t i = 0; i < found.size(); ++i)
    DIT_CHECK(found[i] == std::int64_t(i), (fs::path(dir) / (std::to_string(i) + ".npy")).string(),
              " is missing, expected 0.npy .. ", found.back(), ".npy without gaps");
  return std::int64_t(found.size());
}

// Latents are refused with a non-finite value (training would stop at its first step): the message
// names the file and the index, in the .npy's own (1, C, H, W) coordinates.
void check_finite(const float* v, const std::vector<std::int64_t>& shape, const std::string& path) {
  const std::int64_t n = shape[0] * shape[1] * shape[2] * shape[3];
  for (std::int64_t i = 0; i < n; ++i) {
    if (std::isfinite(v[i])) continue;
    std::vector<std::int64_t> at(4);
    std::int64_t r = i;
    for (int d = 3; d >= 0; --d) at[std::size_t(d)] = r % shape[std::size_t(d)], r /= shape[std::size_t(d)];
    DIT_FAIL(path, ": holds ", std::isnan(v[i]) ? "NaN" : "Inf", " at index ", shape_str(at), " (flat ", i,
             "), expected finite latents: re-extract the features");
  }
}

// One '<i8' or '<i4' label of shape (1,) in [0, num_classes) (below 2^24 when num_classes is 0).
std::int64_t read_label(const std::string& lpath, int num_classes) {
  const Npy y = read_npy(lpath);
  DIT_CHECK((y.descr == "<i8" || y.descr == "<i4") && y.numel() == 1, lpath, ": ", y.descr, " ",
            shape_str(y.shape), ", expected one '<i8' or '<i4' label of shape (1,)");
  std::int64_t v = 0;
  if (y.descr == "<i8") {
    std::memcpy(&v, y.data.data(), 8);
  } else {
    std::int32_t v32 = 0;
    std::memcpy(&v32, y.data.data(), 4);
    v = v32;
  }
  const std::int64_t bound = num_classes > 0 ? num_classes : (1 << 24);
  DIT_CHECK(v >= 0 && v < bound, lpath, ": label ", v, ", expected 0 <= label < ", bound);
  return v;
}

}  // namespace

PrepareResult prepare_latents(const std::string& features_dir, const std::string& labels_dir,
                              const std::string& out_path, double latent_scale, Overwrite overwrite,
                              int num_classes) {
  DIT_CHECK(std::isfinite(latent_scale) && latent_scale > 0, "latent scale ", latent_scale,
            ", expected a finite number > 0");
  DIT_CHECK(num_classes >= 0, "num_classes ", num_classes, ", expected >= 1 (or 0: max label + 1)");
  check_target(out_path, overwrite);
  const std::int64_t n = count_indexed(features_dir);
  const std::int64_t n_labels = count_indexed(labels_dir);
  DIT_CHECK(n_labels == n, labels_dir, ": holds ", n_labels, " label files but ", features_dir,
            " holds ", n, " feature files, expected equal counts");
  auto feature = [&](std::int64_t i) {
    const std::string path = (fs::path(features_dir) / (std::to_string(i) + ".npy")).string();
    Npy x = read_npy(path);
    DIT_CHECK(x.descr == "<f4", path, ": dtype '", x.descr, "', expected '<f4' (float32)");
    DIT_CHECK(x.shape.size() == 4 && x.shape[0] == 1 && x.numel() > 0 && x.numel() <= (1 << 26),
              path, ": shape ", shape_str(x.shape), ", expected (1, C, H, W)");
    return std::pair{path, std::move(x)};
  };
  const auto first = feature(0);
  const std::vector<std::int64_t> chw = first.second.shape;
  const std::int64_t sample = first.second.numel();
  std::vector<std::int32_t> labels(static_cast<std::size_t>(n));
  std::int64_t max_label = 0;
  write_atomically(out_path, kWhat, [&](const std::string& tmp) {
    DatasetLayout layout{n, int(chw[1]), int(chw[2]), int(chw[3]), true};
    layout.text_bytes = features_dir.size() + 64;
    DatasetWriter writer(tmp, layout);
    const std::int64_t batch = std::max<std::int64_t>(1, (std::int64_t(16) << 20) / sample);
    std::vector<float> buf(std::size_t(std::min(batch, n) * sample));
    for (std::int64_t i = 0; i < n; ++i) {
      const auto [path, x] = i == 0 ? first : feature(i);
      DIT_CHECK(x.shape == chw, path, ": shape ", shape_str(x.shape), ", expected ", shape_str(chw),
                " like 0.npy");
      float* dest = &buf[std::size_t((i % batch) * sample)];
      std::memcpy(dest, x.data.data(), x.data.size());
      check_finite(dest, x.shape, path);
      if ((i + 1) % batch == 0 || i + 1 == n) writer.write(i - i % batch, i % batch + 1, buf.data());
      const std::string lpath = (fs::path(labels_dir) / (std::to_string(i) + ".npy")).string();
      const std::int64_t v = read_label(lpath, num_classes);
      labels[std::size_t(i)] = std::int32_t(v);
      max_label = std::max(max_label, v);
    }
    const double scale = latent_scale;
    write_dataset_attr(writer.file(), "latent_scale", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &scale, 0, tmp);
    writer.finish(labels, num_classes > 0 ? num_classes : int(max_label + 1), "fast-DiT latents " + features_dir);
  });
  return PrepareResult{out_path, n, num_classes > 0 ? num_classes : int(max_label + 1)};
}

}  // namespace dit
