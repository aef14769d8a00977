// PNG writing through libpng's simplified API (no setjmp in our code), encoded in memory and
// written atomically, and the sample grid.
#include "io/png.h"

#include <png.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "io/atomic_file.h"

namespace dit {

namespace {

// The tEXt chunk's data: the keyword "Software" (one of PNG's registered keywords), a NUL, the text.
const std::string kPngMark("Software\0dit_mp", 15);
constexpr std::size_t kIhdrEnd = 8 + 4 + 4 + 13 + 4;  // signature, IHDR's length, type, data and CRC

// PNG's chunk CRC (ISO 3309, the polynomial 0xEDB88320 reflected) over a chunk's type and data.
std::uint32_t chunk_crc(const std::string& type_and_data) {
  std::uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : type_and_data) {
    c ^= b;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
  }
  return c ^ 0xFFFFFFFFu;
}

void put_u32(std::string& s, std::uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) s.push_back(char((v >> shift) & 0xFF));
}

// The tEXt chunk that marks a PNG as dit_mp's: length, type, data, CRC.
std::string mark_chunk() {
  std::string chunk;
  put_u32(chunk, std::uint32_t(kPngMark.size()));
  const std::string body = "tEXt" + kPngMark;
  chunk += body;
  put_u32(chunk, chunk_crc(body));
  return chunk;
}

}  // namespace

bool png_written_by_dit_mp(const std::string& head) {
  static const std::string sig("\x89PNG\r\n\x1a\n", 8);
  static const std::string chunk = mark_chunk();
  return head.size() >= kIhdrEnd + chunk.size() && head.compare(0, sig.size(), sig) == 0 &&
         head.compare(12, 4, "IHDR") == 0 && head.compare(kIhdrEnd, chunk.size(), chunk) == 0;
}

void write_png(const std::string& path, int width, int height, int channels,
               const std::uint8_t* pixels) {
  DIT_CHECK(channels == 1 || channels == 3, path, ": cannot write a PNG of ", channels,
            " channels, expected 1 (grey) or 3 (RGB)");
  DIT_CHECK(width > 0 && height > 0 && width <= (1 << 20) && height <= (1 << 20), path,
            ": cannot write a PNG of ", width, "x", height, ", expected sides in [1, 2^20]");
  DIT_CHECK(pixels != nullptr, path, ": no pixels to write");
  check_writable_target(path, "PNG");
  png_image image;
  std::memset(&image, 0, sizeof image);
  image.version = PNG_IMAGE_VERSION;
  image.width = png_uint_32(width);
  image.height = png_uint_32(height);
  image.format = channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  // Encoded in memory (the first call measures), then written by the atomic writer.
  png_alloc_size_t size = 0;
  std::string bytes;
  int ok = png_image_write_get_memory_size(image, size, 0, pixels, 0, nullptr);
  if (ok) {
    bytes.resize(size);
    ok = png_image_write_to_memory(&image, bytes.data(), &size, 0, pixels, 0, nullptr);
    bytes.resize(size);
  }
  const std::string why = image.message;
  png_image_free(&image);
  DIT_CHECK(ok, "PNG ", path, ": cannot encode (", why, ")");
  DIT_CHECK(bytes.size() > kIhdrEnd && bytes.compare(12, 4, "IHDR") == 0, "PNG ", path,
            ": libpng's encoding does not open with IHDR");
  bytes.insert(kIhdrEnd, mark_chunk());  // any chunk order between IHDR and IDAT is valid for tEXt
  write_file_atomic(path, bytes, "PNG");
}

Grid make_grid(const Tensor& images, int rows, int cols, int padding) {
  DIT_CHECK(images.device == Device::Host && images.dtype == DType::F32, "make_grid: images must ",
            "be host float32, got ", dtype_name(images.dtype),
            images.device == Device::Host ? " on the host" : " on the device");
  return make_grid(images.as<const float>(), images.shape, rows, cols, padding);
}

Grid make_grid(const float* src, const Shape& nchw, int rows, int cols, int padding) {
  DIT_CHECK(nchw.rank == 4 && src != nullptr, "make_grid: images must be (N, C, H, W), got ",
            nchw.str());
  const std::int64_t n = nchw[0], c = nchw[1], h = nchw[2], w = nchw[3];
  DIT_CHECK(c != 4, "make_grid: images have 4 channels, which look like VAE latents, not ",
            "pictures; expected C = 1 (grey) or 3 (RGB): decode latents first");
  DIT_CHECK(c == 1 || c == 3, "make_grid: images have ", c,
            " channels, expected C = 1 (grey) or 3 (RGB)");
  DIT_CHECK(rows >= 1 && cols >= 1 && padding >= 0, "make_grid: rows = ", rows, ", cols = ", cols,
            ", padding = ", padding, ", expected rows, cols >= 1 and padding >= 0");
  DIT_CHECK(n <= std::int64_t(rows) * cols, "make_grid: ", n, " images do not fit a ", rows, "x",
            cols, " grid");
  const std::int64_t width = cols * w + (cols + 1) * std::int64_t(padding);
  const std::int64_t height = rows * h + (rows + 1) * std::int64_t(padding);
  DIT_CHECK(h > 0 && w > 0 && width <= (1 << 20) && height <= (1 << 20), "make_grid: a ", rows, "x",
            cols, " grid of ", h, "x", w, " images is ", width, "x", height,
            ", expected non-empty sides up to 2^20");
  Grid g;
  g.width = int(width);
  g.height = int(height);
  g.channels = int(c);
  g.pixels.assign(std::size_t(width * height * c), 0);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t x0 = padding + (i % cols) * (w + padding);
    const std::int64_t y0 = padding + (i / cols) * (h + padding);
    for (std::int64_t ch = 0; ch < c; ++ch)
      for (std::int64_t y = 0; y < h; ++y)
        for (std::int64_t x = 0; x < w; ++x) {
          const float v = src[((i * c + ch) * h + y) * w + x];
          DIT_CHECK(!std::isnan(v), "make_grid: image ", i, " holds NaN at (", ch, ", ", y, ", ", x,
                    ")");
          const float u = (std::clamp(v, -1.0f, 1.0f) + 1.0f) * 127.5f;
          g.pixels[std::size_t(((y0 + y) * width + x0 + x) * c + ch)] =
              std::uint8_t(std::floor(u + 0.5f));
        }
  }
  return g;
}

}  // namespace dit
