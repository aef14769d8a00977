// Decoding and ADM's centre crop (see image_prep.h). The checks before stb_image walk the file's
// own structure (JPEG segments and scans, PNG chunks with their CRCs), because stb_image decodes a
// truncated JPEG without complaint and converts CMYK with a guess; the resampling is Pillow's
// Resample.c (precompute_coeffs, normalize_coeffs_8bpc, the 8-bit passes) in the same arithmetic.
#include "io/image_prep.h"

#include <stb/stb_image.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

#include "core/error.h"
#include "io/file_safety.h"

namespace dit {

namespace {

// PIL's Image.MAX_IMAGE_PIXELS is 89478485; twice that is its DecompressionBombError.
constexpr std::int64_t kMaxPixels = 2 * std::int64_t(89478485);

std::uint32_t be16(const unsigned char* p) { return std::uint32_t(p[0]) << 8 | p[1]; }
std::uint32_t be32(const unsigned char* p) { return be16(p) << 16 | be16(p + 2); }

std::string hex2(unsigned v) {
  char s[8];
  std::snprintf(s, sizeof s, "%02X", v & 0xffu);
  return s;
}

// Why a JPEG cannot be used, or "": its segments up to the first scan, then every scan to the
// end-of-image marker. SOF gives the components; Adobe's APP14 says how 4 of them are coded.
std::string jpeg_problem(const unsigned char* b, std::size_t n) {
  std::size_t pos = 2;
  int components = 0, adobe_transform = -1;
  bool scanned = false;
  for (;;) {
    if (pos >= n) return "a truncated JPEG (it ends before its end-of-image marker)";
    if (b[pos] != 0xFF) return "a corrupt JPEG (no marker at byte " + std::to_string(pos) + ")";
    while (pos < n && b[pos] == 0xFF) ++pos;  // fill bytes
    if (pos >= n) return "a truncated JPEG (it ends before its end-of-image marker)";
    const unsigned marker = b[pos++];
    if (marker == 0xD9) break;                                     // EOI
    if ((marker >= 0xD0 && marker <= 0xD7) || marker == 0x01) continue;  // no length
    if (pos + 2 > n || pos + be16(b + pos) > n)
      return "a truncated JPEG (its segment " + hex2(marker) + " at byte " + std::to_string(pos - 2) + " is cut short)";
    const std::size_t len = be16(b + pos);
    if (len < 2) return "a corrupt JPEG (segment " + hex2(marker) + " of length " + std::to_string(len) + ")";
    const unsigned char* seg = b + pos + 2;
    const std::size_t seg_len = len - 2;
    const bool sof = marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC;
    if (sof && seg_len >= 6) components = seg[5];
    if (marker == 0xEE && seg_len >= 12 && std::memcmp(seg, "Adobe", 5) == 0) adobe_transform = seg[11];
    pos += len;
    if (marker != 0xDA) continue;
    scanned = true;
    // Entropy-coded data: 0xFF is followed by 0x00 (a stuffed byte), a restart marker or fill;
    // anything else is the next marker.
    for (;;) {
      const void* ff = pos < n ? std::memchr(b + pos, 0xFF, n - pos) : nullptr;
      if (ff == nullptr) return "a truncated JPEG (its image data ends before the end-of-image marker)";
      pos = std::size_t(static_cast<const unsigned char*>(ff) - b);
      if (pos + 1 >= n) return "a truncated JPEG (its image data ends before the end-of-image marker)";
      const unsigned next = b[pos + 1];
      if (next == 0x00 || (next >= 0xD0 && next <= 0xD7)) {
        pos += 2;
      } else if (next == 0xFF) {
        pos += 1;
      } else {
        break;  // a marker: the loop above reads it
      }
    }
  }
  if (!scanned) return "a corrupt JPEG (an end-of-image marker before any image data)";
  if (components == 4)
    return std::string("a ") + (adobe_transform == 2 ? "YCCK" : "CMYK") +
           " JPEG (4 colour components): its colours depend on a colour profile that dit_mp does not apply; "
           "convert it to RGB";
  if (components != 1 && components != 3)
    return "a JPEG with " + std::to_string(components) + " colour components (expected 1 or 3)";
  return "";
}

// Why a PNG cannot be used, or "": every chunk complete and matching its CRC, up to IEND.
std::string png_problem(const unsigned char* b, std::size_t n) {
  for (std::size_t pos = 8;;) {
    if (pos + 8 > n) return "a truncated PNG (it ends before its IEND chunk)";
    const std::uint64_t len = be32(b + pos);
    const std::string type(reinterpret_cast<const char*>(b + pos + 4), 4);
    if (pos + 12 + len > n)
      return "a truncated PNG (its " + type + " chunk at byte " + std::to_string(pos) + " is cut short)";
    const uLong crc = crc32(crc32(0L, Z_NULL, 0), b + pos + 4, uInt(len + 4));
    if (crc != be32(b + pos + 8 + len))
      return "a corrupt PNG (its " + type + " chunk at byte " + std::to_string(pos) + " fails its CRC)";
    if (type == "IEND") return "";
    pos += 12 + len;
  }
}

// --- Pillow's resampling -------------------------------------------------------------------------

constexpr int kPrecisionBits = 32 - 8 - 2;

double box_filter(double x) { return x > -0.5 && x <= 0.5 ? 1.0 : 0.0; }

double bicubic_filter(double x) {
  constexpr double a = -0.5;
  if (x < 0.0) x = -x;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

// One output pixel's taps: source [first, first + weights.size()) with 22-bit fixed-point weights.
struct Taps {
  int first = 0;
  std::vector<std::int32_t> weights;
};

// precompute_coeffs over the whole input (box 0..in_size) followed by normalize_coeffs_8bpc.
std::vector<Taps> coefficients(int in_size, int out_size, Resample filter) {
  const double support_unit = filter == Resample::Box ? 0.5 : 2.0;
  const double scale = double(in_size) / out_size;
  const double filterscale = std::max(scale, 1.0);
  const double support = support_unit * filterscale;
  std::vector<Taps> out(static_cast<std::size_t>(out_size));
  std::vector<double> k;
  for (int xx = 0; xx < out_size; ++xx) {
    const double center = (xx + 0.5) * scale, ss = 1.0 / filterscale;
    const int xmin = std::max(0, int(center - support + 0.5));
    const int xmax = std::min(in_size, int(center + support + 0.5)) - xmin;
    k.assign(std::size_t(std::max(xmax, 0)), 0.0);
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      const double arg = (x + xmin - center + 0.5) * ss;
      k[std::size_t(x)] = filter == Resample::Box ? box_filter(arg) : bicubic_filter(arg);
      ww += k[std::size_t(x)];
    }
    Taps& t = out[std::size_t(xx)];
    t.first = xmin;
    for (double w : k) {
      if (ww != 0.0) w /= ww;
      const double fixed = w * (1 << kPrecisionBits);
      t.weights.push_back(std::int32_t(w < 0 ? -0.5 + fixed : 0.5 + fixed));
    }
  }
  return out;
}

std::uint8_t clip8(std::int64_t ss) {
  return std::uint8_t(std::clamp<std::int64_t>(ss >> kPrecisionBits, 0, 255));
}

RgbImage resample_horizontal(const RgbImage& in, int width, Resample filter) {
  const std::vector<Taps> taps = coefficients(in.width, width, filter);
  RgbImage out{width, in.height, std::vector<std::uint8_t>(std::size_t(width) * in.height * 3)};
  for (int y = 0; y < in.height; ++y) {
    const std::uint8_t* row = &in.pixels[std::size_t(y) * in.width * 3];
    for (int x = 0; x < width; ++x) {
      const Taps& t = taps[std::size_t(x)];
      for (int c = 0; c < 3; ++c) {
        std::int64_t ss = 1 << (kPrecisionBits - 1);
        for (std::size_t i = 0; i < t.weights.size(); ++i)
          ss += std::int64_t(row[(std::size_t(t.first) + i) * 3 + std::size_t(c)]) * t.weights[i];
        out.pixels[(std::size_t(y) * width + x) * 3 + std::size_t(c)] = clip8(ss);
      }
    }
  }
  return out;
}

RgbImage resample_vertical(const RgbImage& in, int height, Resample filter) {
  const std::vector<Taps> taps = coefficients(in.height, height, filter);
  const std::size_t stride = std::size_t(in.width) * 3;
  RgbImage out{in.width, height, std::vector<std::uint8_t>(stride * height)};
  for (int y = 0; y < height; ++y) {
    const Taps& t = taps[std::size_t(y)];
    for (std::size_t j = 0; j < stride; ++j) {
      std::int64_t ss = 1 << (kPrecisionBits - 1);
      for (std::size_t i = 0; i < t.weights.size(); ++i)
        ss += std::int64_t(in.pixels[(std::size_t(t.first) + i) * stride + j]) * t.weights[i];
      out.pixels[std::size_t(y) * stride + j] = clip8(ss);
    }
  }
  return out;
}

}  // namespace

std::string image_size_problem(const std::string& bytes) {
  const auto* b = reinterpret_cast<const unsigned char*>(bytes.data());
  const std::size_t n = bytes.size();
  std::int64_t w = 0, h = 0;
  if (n >= 24 && std::memcmp(b, "\x89PNG\r\n\x1a\n", 8) == 0 && std::memcmp(b + 12, "IHDR", 4) == 0) {
    // The sides IHDR declares: stb_image refuses a large PNG in its header probe with a reason of
    // whichever format it tried last ("unknown image type"), so they are read here.
    w = std::int64_t(be32(b + 16));
    h = std::int64_t(be32(b + 20));
  } else {
    int iw = 0, ih = 0, comp = 0;
    if (n > std::size_t(INT32_MAX) || !stbi_info_from_memory(b, int(n), &iw, &ih, &comp)) return "";
    w = iw;
    h = ih;
  }
  if (w * h <= kMaxPixels) return "";
  return std::to_string(w) + "x" + std::to_string(h) + " pixels, over PIL's decompression-bomb limit of " +
         std::to_string(kMaxPixels);
}

std::vector<std::uint8_t> decode_rgb8(const unsigned char* b, int n, int& w, int& h) {
  int comp = 0;
  const bool grey16 = n >= 26 && std::memcmp(b, "\x89PNG\r\n\x1a\n", 8) == 0 && std::memcmp(b + 12, "IHDR", 4) == 0 &&
                      b[24] == 16 && b[25] == 0;  // bit depth 16, colour type 0 (grey, no alpha)
  std::vector<std::uint8_t> out;
  if (grey16) {
    std::unique_ptr<stbi_us, void (*)(void*)> grey(stbi_load_16_from_memory(b, n, &w, &h, &comp, 1), stbi_image_free);
    if (grey == nullptr) return out;
    out.resize(std::size_t(w) * h * 3);
    for (std::size_t i = 0; i < std::size_t(w) * h; ++i)
      out[3 * i] = out[3 * i + 1] = out[3 * i + 2] = std::uint8_t(std::min<int>(grey.get()[i], 255));
    return out;
  }
  std::unique_ptr<stbi_uc, void (*)(void*)> rgb(stbi_load_from_memory(b, n, &w, &h, &comp, 3), stbi_image_free);
  if (rgb != nullptr) out.assign(rgb.get(), rgb.get() + std::size_t(w) * h * 3);
  return out;
}

DecodedImage decode_image(const std::string& bytes) {
  DecodedImage d;
  const auto* b = reinterpret_cast<const unsigned char*>(bytes.data());
  const std::size_t n = bytes.size();
  if (n >= 8 && std::memcmp(b, "\x89PNG\r\n\x1a\n", 8) == 0) {
    d.problem = png_problem(b, n);
  } else if (n >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF) {
    d.problem = jpeg_problem(b, n);
  } else {
    d.problem = n == 0 ? "an empty file" : "neither PNG nor JPEG data";
  }
  if (!d.ok()) return d;
  DIT_CHECK(n <= std::size_t(INT32_MAX), "an image file of ", n, " bytes (at most 2 GiB)");
  d.problem = image_size_problem(bytes);
  if (!d.ok()) return d;
  int w = 0, h = 0, comp = 0;
  if (!stbi_info_from_memory(b, int(n), &w, &h, &comp)) {
    d.problem = std::string("stb_image cannot read it (") + stbi_failure_reason() + ")";
    return d;
  }
  d.image.pixels = decode_rgb8(b, int(n), w, h);
  if (d.image.pixels.empty()) {
    d.problem = std::string("stb_image cannot decode it (") + stbi_failure_reason() + ")";
    return d;
  }
  d.image.width = w;
  d.image.height = h;
  return d;
}

DecodedImage decode_image_file(const std::string& path) {
  if (std::string why = not_a_regular_file(path); !why.empty()) {  // a FIFO, a dangling link: --bad-files decides
    DecodedImage d;
    d.problem = std::move(why);
    return d;
  }
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  if (in) bytes << in.rdbuf();
  if (!in || in.bad()) {
    DecodedImage d;
    d.problem = std::string("cannot be read (") + std::strerror(errno) + ")";
    return d;
  }
  return decode_image(bytes.str());
}

RgbImage pil_resize(const RgbImage& in, int width, int height, Resample filter) {
  DIT_CHECK(in.width > 0 && in.height > 0 && width > 0 && height > 0 &&
                std::int64_t(width) * height <= kMaxPixels,
            "resize of a ", in.width, "x", in.height, " image to ", width, "x", height,
            ": expected sizes >= 1 and at most ", kMaxPixels, " pixels");
  // Pillow: horizontal first (when the width changes), then vertical; the same size is a copy.
  RgbImage out = width != in.width ? resample_horizontal(in, width, filter) : in;
  if (height != in.height) out = resample_vertical(out, height, filter);
  return out;
}

RgbImage center_crop_arr(const RgbImage& in, int size) {
  DIT_CHECK(size >= 1, "crop size ", size, ", expected >= 1");
  RgbImage img = in;
  while (std::min(img.width, img.height) >= 2 * size) img = pil_resize(img, img.width / 2, img.height / 2, Resample::Box);
  const double scale = double(size) / std::min(img.width, img.height);
  img = pil_resize(img, int(std::nearbyint(img.width * scale)), int(std::nearbyint(img.height * scale)),
                   Resample::Bicubic);
  DIT_CHECK(img.width >= size && img.height >= size, "centre crop: resized to ", img.width, "x", img.height,
            ", smaller than ", size);
  const int y0 = (img.height - size) / 2, x0 = (img.width - size) / 2;
  RgbImage out{size, size, std::vector<std::uint8_t>(std::size_t(size) * size * 3)};
  for (int y = 0; y < size; ++y)
    std::memcpy(&out.pixels[std::size_t(y) * size * 3], &img.pixels[(std::size_t(y0 + y) * img.width + x0) * 3],
                std::size_t(size) * 3);
  return out;
}

void to_unit_chw(const RgbImage& in, Mirror mirror, float* out) {
  const std::size_t plane = std::size_t(in.width) * in.height;
  for (int y = 0; y < in.height; ++y)
    for (int x = 0; x < in.width; ++x) {
      const int sx = mirror == Mirror::Yes ? in.width - 1 - x : x;
      const std::uint8_t* p = &in.pixels[(std::size_t(y) * in.width + sx) * 3];
      for (int c = 0; c < 3; ++c) out[std::size_t(c) * plane + std::size_t(y) * in.width + x] = float(p[c]) / 127.5f - 1.0f;
    }
}

}  // namespace dit
