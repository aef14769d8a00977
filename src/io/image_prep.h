// Pictures as the official DiT hands them to its VAE: a PNG or JPEG file decoded to 8-bit RGB
// (stb_image; files it would misread, CMYK JPEGs and truncated or corrupt files, are named first),
// then ADM's center_crop_arr (facebookresearch/DiT train.py) with PIL's resampling reproduced in
// its own fixed-point arithmetic, then x / 127.5 - 1 in (3, size, size), optionally mirrored.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dit {

// 8-bit RGB, rows top to bottom, channels interleaved: pixels[(y * width + x) * 3 + c].
struct RgbImage {
  int width = 0, height = 0;
  std::vector<std::uint8_t> pixels;  // (height, width, 3)
};

// A decoded file, or why it cannot be used.
struct DecodedImage {
  RgbImage image;
  std::string problem;  // "" when decoded; else one phrase such as "a CMYK JPEG (4 colour components) ..."
  bool ok() const { return problem.empty(); }
};

// Decodes PNG or JPEG data, told apart by their signatures (not by the file's extension). Grey,
// grey + alpha, palette and RGBA images become RGB as PIL's convert("RGB") makes them (alpha
// dropped). Refused, with the reason in `problem`: CMYK or YCCK JPEGs (4 components: their colours
// depend on a profile), a JPEG without its end-of-image marker or a segment cut short, a PNG whose
// chunks stop before IEND or fail their CRC, other formats, and images over PIL's
// decompression-bomb limit (178956970 pixels).
DecodedImage decode_image(const std::string& bytes);
// 8-bit RGB pixels (h, w, 3) of PNG or JPEG data as PIL's convert("RGB") makes them: stb_image's,
// except a 16-bit grey PNG, which PIL opens as mode I and clips at 255 (stb_image keeps the high
// byte: 1000 became 3). Empty when stb_image cannot decode it (stbi_failure_reason() says why).
std::vector<std::uint8_t> decode_rgb8(const unsigned char* bytes, int n, int& w, int& h);
// Why a PNG or JPEG is too large to decode (its sides, over PIL's decompression-bomb limit), or "":
// the one reason both ways of preparing pictures give (pixels, and VAE latents).
std::string image_size_problem(const std::string& bytes);
// The same for a file; an unreadable file is a problem too.
DecodedImage decode_image_file(const std::string& path);

enum class Resample { Box, Bicubic };

// PIL's Image.resize((width, height), resample) of an RGB image (Pillow's Resample.c): separable
// filters, support scaled by the downscaling factor (antialiasing), coefficients normalised in
// double then rounded to 22-bit fixed point, the horizontal pass first with its rows rounded to
// 8 bits, then the vertical. Box: 1 on (-1/2, 1/2]; bicubic: Keys' kernel with a = -1/2.
RgbImage pil_resize(const RgbImage& in, int width, int height, Resample filter);

// ADM's center_crop_arr: while the short side >= 2 * size, BOX-resize to (w // 2, h // 2); then
// BICUBIC-resize to (round(w * s), round(h * s)) with s = size / short side (Python's round: half
// to even); then crop size x size at ((h - size) // 2, (w - size) // 2).
RgbImage center_crop_arr(const RgbImage& in, int size);

enum class Mirror : bool { No, Yes };
// (3, H, W) floats x / 127.5 - 1 of the image, left and right swapped with Mirror::Yes.
void to_unit_chw(const RgbImage& in, Mirror mirror, float* out);

}  // namespace dit
