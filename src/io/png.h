// PNG output for sample grids: write_png (libpng, encoded in memory and written atomically, so a
// reader never sees half a file, and marked as dit_mp's by a tEXt chunk, so that a later command
// replaces only a grid dit_mp wrote) and make_grid, which tiles (N, C, H, W) samples in [-1, 1].
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace dit {

// 8-bit pixels, row-major with channels interleaved: pixels[(y * width + x) * channels + c].
struct Grid {
  std::vector<std::uint8_t> pixels;  // (height, width, channels)
  int width = 0, height = 0, channels = 0;
};

// Writes an 8-bit grey (channels = 1) or RGB (channels = 3) PNG whose first chunk after IHDR is
// the tEXt "Software" = "dit_mp" (kPngMark). Errors name the path.
void write_png(const std::string& path, int width, int height, int channels,
               const std::uint8_t* pixels);
inline void write_png(const std::string& path, const Grid& g) {
  write_png(path, g.width, g.height, g.channels, g.pixels.data());
}

// Whether `head` (a file's first bytes, at least 64 of them) is a PNG that write_png wrote: the PNG
// signature, IHDR, then dit_mp's tEXt chunk. A PNG of any other program is a user's picture.
bool png_written_by_dit_mp(const std::string& head);

// Tiles float32 images (N, C, H, W), C = 1 (grey) or 3 (RGB), in row-major order on a
// rows x cols grid with `padding` pixels of black around and between the tiles (torchvision's
// make_grid layout): width = cols * W + (cols + 1) * padding, likewise height. Values are clamped
// to [-1, 1] and mapped to round((x + 1) * 127.5). N <= rows * cols; empty cells stay black.
// C = 4 (latents) is rejected: decode latents before making pictures of them.
Grid make_grid(const float* images, const Shape& nchw, int rows, int cols, int padding);
Grid make_grid(const Tensor& images, int rows, int cols, int padding);  // host float32 only

}  // namespace dit
