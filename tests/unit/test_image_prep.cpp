// Images into the VAE (io/image_prep.h): decoding and ADM's center_crop_arr against PIL itself.
// The expected pixels are PIL's (Pillow 9.4, tools/make_image_prep_golden.py): its decoding of each
// file converted to RGB, and center_crop_arr as facebookresearch/DiT's train.py runs it on that
// decoding, on crops of a real photograph (tests/data/image_prep/README.md). PNG decoding and every
// crop must match PIL exactly; JPEG decoders legitimately differ (stb_image is not libjpeg), so stb's
// JPEG pixels are held within a bound measured here. Then the refusals: a CMYK JPEG, truncated
// JPEG and PNG files, a PNG with a bad CRC, other data, each a one-phrase reason. vae_latent_work:
// the resumable work folder (records, a torn tail cut off, other settings and foreign files
// refused, a damaged record found). vae_latents: the whole preparation on one rank against the
// pieces composed by hand.
#include <gtest/gtest.h>

#include <zlib.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <utility>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/arena.h"
#include "engine/image_latents.h"
#include "io/h5.h"
#include "io/h5_dataset.h"
#include "io/image_prep.h"
#include "io/latent_work.h"
#include "io/vae_weights.h"
#include "layers/vae.h"
#include "run/vae_decode.h"
#include "io_test_util.h"
#include "zero_vae.h"

namespace dit {

namespace {

namespace fs = std::filesystem;

const std::string kDir = std::string(DIT_TEST_DATA) + "/image_prep/";
const std::string kTinyVae = std::string(DIT_TEST_DATA) + "/vae_tiny.safetensors";
const std::string kGolden = kDir + "image_prep_golden.h5";

std::uint32_t crc_of(const std::vector<std::uint8_t>& v) {
  return std::uint32_t(crc32(crc32(0L, Z_NULL, 0), v.data(), uInt(v.size())));
}

std::vector<std::uint8_t> bytes_of(const h5::Array& a) {
  std::vector<std::uint8_t> v;
  for (double x : a.values) v.push_back(std::uint8_t(x));
  return v;
}

RgbImage pil_decoded(const h5::File& g, const std::string& file) {
  const h5::Array a = g.read("/decoded/" + file);
  return RgbImage{int(a.shape[1]), int(a.shape[0]), bytes_of(a)};
}

RgbImage decoded(const std::string& file) {
  DecodedImage d = decode_image_file(kDir + file);
  EXPECT_TRUE(d.ok()) << file << ": " << d.problem;
  return d.image;
}

std::string problem_of(const std::string& bytes) { return decode_image(bytes).problem; }

// A one-row 16-bit PNG of colour type `colour` (0 grey, 4 grey + alpha) whose samples are `v`
// (each followed by an opaque alpha for type 4).
std::string png16_row(const std::vector<int>& v, int colour) {
  auto be = [](std::string& s, std::uint32_t x, int bytes) {
    for (int i = bytes - 1; i >= 0; --i) s += char((x >> (8 * i)) & 0xFF);
  };
  auto chunk = [&](const std::string& kind, const std::string& data) {
    std::string c;
    be(c, std::uint32_t(data.size()), 4);
    const std::string body = kind + data;
    be(c += body, std::uint32_t(crc32(0L, reinterpret_cast<const Bytef*>(body.data()), uInt(body.size()))), 4);
    return c;
  };
  std::string ihdr, raw(1, '\0');
  be(ihdr, std::uint32_t(v.size()), 4);
  be(ihdr, 1, 4);
  ihdr += std::string{char(16), char(colour), 0, 0, 0};
  for (int x : v) {
    be(raw, std::uint32_t(x), 2);
    if (colour == 4) be(raw, 65535, 2);
  }
  uLongf len = compressBound(uLong(raw.size()));
  std::string z(len, '\0');
  compress(reinterpret_cast<Bytef*>(z.data()), &len, reinterpret_cast<const Bytef*>(raw.data()), uLong(raw.size()));
  z.resize(len);
  return std::string("\x89PNG\r\n\x1a\n", 8) + chunk("IHDR", ihdr) + chunk("IDAT", z) + chunk("IEND", "");
}

}  // namespace

// PNG decoding (RGB, grey, RGBA, palette) gives PIL's convert("RGB") pixels exactly.
TEST(image_prep, PngDecodingMatchesPil) {
  const h5::File g = h5::File::open_read(kGolden);
  int checked = 0;
  for (const std::string& file : g.members("/decoded")) {
    if (file.size() < 4 || file.substr(file.size() - 4) != ".png") continue;
    const std::vector<std::int64_t> shape = g.read_ints("/decoded/" + file);
    const RgbImage im = decoded(file);
    EXPECT_EQ(im.height, shape[0]) << file;
    EXPECT_EQ(im.width, shape[1]) << file;
    EXPECT_EQ(crc_of(im.pixels), std::uint32_t(g.attr_int("/decoded/" + file, "crc32"))) << file;
    ++checked;
  }
  EXPECT_EQ(checked, 5);
}

// 16-bit PNGs as PIL's convert("RGB") makes them (Pillow 9.4): a grey one opens as mode I and is
// clipped at 255; grey + alpha opens as RGBA and keeps the high byte, as stb_image does for both.
TEST(image_prep, Png16BitMatchesPil) {
  const std::vector<int> v = {0, 100, 255, 256, 1000, 65535};
  const std::vector<int> grey = {0, 100, 255, 255, 255, 255}, grey_alpha = {0, 0, 0, 1, 3, 255};
  for (const auto& [colour, want] : {std::pair{0, grey}, std::pair{4, grey_alpha}}) {
    const DecodedImage d = decode_image(png16_row(v, colour));
    ASSERT_TRUE(d.ok()) << d.problem;
    ASSERT_EQ(d.image.pixels.size(), 3 * v.size());
    for (std::size_t i = 0; i < v.size(); ++i)
      for (int c = 0; c < 3; ++c) EXPECT_EQ(int(d.image.pixels[3 * i + std::size_t(c)]), want[i]) << "colour type " << colour << ", sample " << v[i];
  }
}

// center_crop_arr on PIL's decoded pixels equals PIL's, byte for byte: BOX halving of odd sides,
// bicubic down- and upscaling, the half-way rounding of the resized side, the same size kept.
TEST(image_prep, CenterCropMatchesPilExactly) {
  const h5::File g = h5::File::open_read(kGolden);
  int checked = 0;
  for (const std::string& name : g.members("/crop")) {
    const std::string where = "/crop/" + name, file = g.attr_string(where, "file");
    const int size = int(g.attr_int(where, "size"));
    const RgbImage src = file.substr(file.size() - 4) == ".jpg" ? pil_decoded(g, file) : decoded(file);
    const RgbImage got = center_crop_arr(src, size);
    const std::vector<std::uint8_t> want = bytes_of(g.read(where));
    ASSERT_EQ(got.width, size) << name;
    ASSERT_EQ(got.height, size) << name;
    int differ = 0;
    for (std::size_t i = 0; i < want.size(); ++i) differ += got.pixels[i] != want[i];
    EXPECT_EQ(differ, 0) << name << ": " << differ << " of " << want.size() << " values differ from PIL's";
    long sum = 0;
    for (auto v : got.pixels) sum += v;
    EXPECT_GT(sum, 0) << name << ": an all-black crop proves nothing";
    ++checked;
  }
  EXPECT_EQ(checked, 9);
}

// stb_image's JPEG decoding is not libjpeg's (its IDCT and chroma upsampling round differently).
// Measured on these files: 6.6% of photo_f.jpg's values (4:2:0 chroma) differ, by at most 3
// levels, 0.5% of gray_g.jpg's by at most 1, and 9.9% of photo_f's 32 x 32 crop by at most 1;
// held here at 15% and 4 levels, for the decoded pixels and for the crop against PIL's crop.
TEST(image_prep, JpegDecodingIsCloseToPil) {
  const h5::File g = h5::File::open_read(kGolden);
  auto compare = [](const std::string& what, const std::vector<std::uint8_t>& got,
                    const std::vector<std::uint8_t>& want) {
    ASSERT_EQ(got.size(), want.size()) << what;
    int worst = 0, differ = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
      const int d = std::abs(int(got[i]) - int(want[i]));
      worst = std::max(worst, d);
      differ += d != 0;
    }
    const double share = double(differ) / double(want.size());
    std::printf("%s: stb_image vs PIL: %.2f%% of values differ, by at most %d\n", what.c_str(), 100 * share, worst);
    EXPECT_LE(worst, 4) << what;
    EXPECT_LE(share, 0.15) << what;
  };
  for (const std::string file : {"photo_f.jpg", "gray_g.jpg"}) {
    const RgbImage stb = decoded(file);
    compare(file, stb.pixels, pil_decoded(g, file).pixels);
    if (file == "photo_f.jpg") compare("its crop", center_crop_arr(stb, 32).pixels, bytes_of(g.read("/crop/photo_f.jpg_32")));
  }
}

TEST(image_prep, UnitRangeAndMirror) {
  RgbImage im{2, 1, {0, 127, 255, 10, 20, 30}};
  std::vector<float> out(6), mirrored(6);
  to_unit_chw(im, Mirror::No, out.data());
  to_unit_chw(im, Mirror::Yes, mirrored.data());
  EXPECT_EQ(out, (std::vector<float>{-1.f, 10 / 127.5f - 1, 127 / 127.5f - 1, 20 / 127.5f - 1, 1.f, 30 / 127.5f - 1}));
  EXPECT_EQ(mirrored, (std::vector<float>{10 / 127.5f - 1, -1.f, 20 / 127.5f - 1, 127 / 127.5f - 1, 30 / 127.5f - 1, 1.f}));
}

// What a folder of real pictures holds besides good files: each refused with its reason.
TEST(image_prep, RefusesCmykTruncatedAndCorruptFiles) {
  const std::string cmyk = io_test::read_all(kDir + "cmyk.jpg"), jpg = io_test::read_all(kDir + "photo_f.jpg"),
                    png = io_test::read_all(kDir + "gray_c.png");
  ASSERT_FALSE(cmyk.empty() || jpg.empty() || png.empty());
  EXPECT_EQ(problem_of(cmyk).rfind("a CMYK JPEG (4 colour components)", 0), 0u) << problem_of(cmyk);
  EXPECT_EQ(problem_of(jpg), "");
  EXPECT_EQ(problem_of(png), "");
  // Cut in the image data, in a header segment, at the end-of-image marker.
  EXPECT_EQ(problem_of(jpg.substr(0, jpg.size() / 2)),
            "a truncated JPEG (its image data ends before the end-of-image marker)");
  EXPECT_NE(problem_of(jpg.substr(0, 30)).find("a truncated JPEG (its segment"), std::string::npos)
      << problem_of(jpg.substr(0, 30));
  EXPECT_NE(problem_of(jpg.substr(0, jpg.size() - 2)).find("a truncated JPEG"), std::string::npos);
  EXPECT_NE(problem_of(png.substr(0, png.size() / 2)).find("a truncated PNG (its IDAT chunk"), std::string::npos)
      << problem_of(png.substr(0, png.size() / 2));
  EXPECT_EQ(problem_of(png.substr(0, png.size() - 12)), "a truncated PNG (it ends before its IEND chunk)");
  std::string flipped = png;
  flipped[png.size() / 2] = char(flipped[png.size() / 2] ^ 0x10);
  EXPECT_NE(problem_of(flipped).find("fails its CRC"), std::string::npos) << problem_of(flipped);
  EXPECT_EQ(problem_of("GIF89a..."), "neither PNG nor JPEG data");
  EXPECT_EQ(problem_of(""), "an empty file");
  EXPECT_NE(decode_image_file(kDir + "no_such.png").problem.find("cannot be read"), std::string::npos);
}

// The work folder: records appended by two ranks are found again with their values; a torn last
// record is cut off before a resumed run appends; other settings and foreign files are refused
// with one line; a damaged record is found when its values are read.
TEST(vae_latent_work, RecordsTornTailsAndRefusals) {
  io_test::Scratch dir("latent_work");
  const std::string out = dir / "o.h5", folder = LatentWork::folder_of(out);
  LatentWork w(out, "size 32\nflips none\n");
  EXPECT_EQ(w.prepare(), 0);
  ASSERT_TRUE(fs::is_regular_file(folder + "/settings.txt"));
  LatentRecord a;
  a.batch = 0;
  a.files_digest = 7;
  a.problems = {"", "a truncated JPEG (...)"};
  a.samples = 1;
  a.sample_floats = 3;
  const std::vector<float> va = {1.5f, -2.f, 3.25f}, vb = {4.f, 5.f, 6.f, 7.f, 8.f, 9.f};
  LatentRecord b = a;
  b.batch = 1;
  b.problems = {"", ""};
  b.samples = 2;
  w.append(0, a, va.data());
  w.append(1, b, vb.data());
  std::vector<LatentRecord> found = w.scan();
  ASSERT_EQ(found.size(), 2u);
  EXPECT_EQ(found[0].batch, 0);
  EXPECT_EQ(found[0].files_digest, 7u);
  EXPECT_EQ(found[0].problems, a.problems);
  EXPECT_EQ(w.read_values(found[0]), va);
  EXPECT_EQ(w.read_values(found[1]), vb);

  // A kill while appending leaves half a record: kept out of the scan, cut off by prepare().
  const std::string part0 = folder + "/part-00000.bin";
  const auto whole = fs::file_size(part0);
  std::string half = io_test::read_all(part0).substr(0, whole / 2);
  std::ofstream(part0, std::ios::binary | std::ios::app) << half;
  EXPECT_EQ(w.scan().size(), 2u);
  LatentWork again(out, "size 32\nflips none\n");
  EXPECT_EQ(again.prepare(), 2);
  EXPECT_EQ(fs::file_size(part0), whole);

  // Other settings: refused, naming the first that differs; the work is kept.
  LatentWork other(out, "size 32\nflips both\n");
  EXPECT_EQ(io_test::error_of([&] { other.prepare(); })
                .rfind(folder + " holds the unfinished work of a preparation with other settings: flips none there, "
                                "both here; rerun that command to finish it, or remove " + folder + " to start afresh",
                       0),
            0u);
  EXPECT_EQ(fs::file_size(part0), whole);
  io_test::write_plain(folder + "/notes.txt", "mine");
  EXPECT_NE(io_test::error_of([&] { again.prepare(); }).find("holds notes.txt, which dit_mp did not write"),
            std::string::npos);
  fs::remove(folder + "/notes.txt");

  // A damaged value in a record that is not its part's last: found when read. (A part's last
  // record is checked by the scan, as a torn one would be: it is left out.)
  again.append(0, b, vb.data());
  {
    std::fstream f(part0, std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(std::streamoff(found[0].bytes - 8));
    f.put('\x7f');
  }
  found = again.scan();
  ASSERT_EQ(found.size(), 3u);
  EXPECT_NE(io_test::error_of([&] { again.read_values(found[0]); }).find("fails its CRC"), std::string::npos);
  EXPECT_EQ(again.read_values(found[1]), vb);
  again.remove();
  EXPECT_FALSE(fs::exists(folder));
}

// The tiny VAE's moments (mean, then log-variance: 8 x 8 x 8) of one picture as the preparation
// makes them, step by step: decode, center_crop_arr to 16, x / 127.5 - 1, the encoder.
std::vector<float> moments_by_hand(const VaeFile& file, const std::string& picture) {
  auto be = make_backend("cpu");
  Vae vae(*be, file.config, file.source());
  Arena arena(*be);
  const RgbImage crop = center_crop_arr(decode_image_file(picture).image, 16);
  std::vector<float> x(3 * 16 * 16), m(8 * 8 * 8);
  to_unit_chw(crop, Mirror::No, x.data());
  Tensor tx = arena.tensor(Shape{1, 3, 16, 16}, DType::F32), tm = arena.tensor(Shape{1, 8, 8, 8}, DType::F32);
  be->copy(tx, Tensor{x.data(), DType::F32, tx.shape, Device::Host});
  vae.encode(tx, tm);
  be->copy(Tensor{m.data(), DType::F32, tm.shape, Device::Host}, tm);
  be->synchronize();
  return m;
}

// The preparation on one rank (no MPI) of a folder of the real pictures, against the same steps by
// hand: decode, center_crop_arr, x / 127.5 - 1, the VAE's encoder, its mean; bit for bit.
TEST(vae_latents, OneRankMatchesThePiecesByHand) {
  io_test::Scratch dir("vae_latents");
  fs::create_directories(dir.path / "imgs" / "a");
  fs::create_directories(dir.path / "imgs" / "b");
  fs::copy_file(kDir + "photo_a.png", dir / "imgs/a/1.png");
  fs::copy_file(kDir + "photo_f.jpg", dir / "imgs/a/2.jpg");
  fs::copy_file(kDir + "gray_c.png", dir / "imgs/b/3.png");
  fs::copy_file(kDir + "cmyk.jpg", dir / "imgs/b/4.jpg");
  ImageLatentsOptions o;
  o.dir = dir / "imgs";
  o.out = dir / "lat.h5";
  o.vae = std::string(DIT_TEST_DATA) + "/vae_tiny.safetensors";
  o.size = 16;
  o.batch = 2;
  EXPECT_NE(io_test::error_of([&] { prepare_image_latents(o); }).find("4.jpg: a CMYK JPEG"), std::string::npos);
  EXPECT_FALSE(fs::exists(o.out));
  o.bad_files = BadFiles::Skip;
  const PrepareResult r = prepare_image_latents(o);
  EXPECT_EQ(r.samples, 3);
  EXPECT_FALSE(fs::exists(LatentWork::folder_of(o.out))) << "the work folder stays";

  H5Dataset data(o.out);
  EXPECT_EQ(data.kind(), "latents");
  EXPECT_EQ(data.num_classes(), 2);
  EXPECT_DOUBLE_EQ(data.latent_scale(), 0.18215);
  const VaeFile file = open_vae(o.vae);
  const char* names[] = {"imgs/a/1.png", "imgs/a/2.jpg", "imgs/b/3.png"};
  for (int i = 0; i < 3; ++i) {
    const std::vector<float> m = moments_by_hand(file, dir / names[i]);
    std::vector<float> served(4 * 8 * 8);
    EXPECT_EQ(data.label(i), i < 2 ? 0 : 1);
    data.get(i, served.data());  // the latent times latent_scale, as training reads it
    for (int j = 0; j < 4 * 8 * 8; ++j)
      ASSERT_EQ(served[std::size_t(j)], m[std::size_t(j)] * float(data.latent_scale())) << names[i] << " value " << j;
  }
}

// The tiny VAE's config.json with text replaced (from -> to), written into `dir`; returns its path.
using Edits = std::vector<std::pair<std::string, std::string>>;
std::string edited_vae_config(const io_test::Scratch& dir, const Edits& edits) {
  std::ifstream in(std::string(DIT_TEST_DATA) + "/vae_tiny_config.json");
  std::string json((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (const auto& [from, to] : edits) {
    const std::size_t at = json.find(from);
    if (at == std::string::npos) throw std::runtime_error("no " + from + " in the config");
    json.replace(at, from.size(), to);
  }
  const std::string path = dir / "config.json";
  std::ofstream(path) << json;
  return path;
}

// One picture (photo_a.png) prepared at 16 x 16 with the tiny VAE under that config: the dataset's path.
std::string prepare_one_picture(const io_test::Scratch& dir, const std::string& config) {
  fs::create_directories(dir.path / "imgs" / "a");
  fs::copy_file(kDir + "photo_a.png", dir / "imgs/a/1.png", fs::copy_options::overwrite_existing);
  ImageLatentsOptions o;
  o.dir = dir / "imgs";
  o.out = dir / "lat.h5";
  o.vae = kTinyVae;
  o.vae_config = config;
  o.size = 16;
  prepare_image_latents(o);
  return o.out;
}

// A VAE without config.json: its shapes give every size but the norm groups and the scale, which
// are assumed, and the dataset records the assumption (vae_assumed); with config.json it has none.
TEST(vae_latents, AssumedGroupsAndScaleAreRecorded) {
  io_test::Scratch dir("vae_assumed");
  VaeConfig cfg;
  cfg.block_out_channels = {32, 32};
  cfg.layers_per_block = 1;
  const std::string vae = dir / "vae.safetensors";
  io_test::write_zero_vae(vae, cfg);
  fs::create_directories(dir.path / "imgs" / "a");
  fs::copy_file(kDir + "photo_a.png", dir / "imgs/a/1.png");
  ImageLatentsOptions o;
  o.dir = dir / "imgs";
  o.out = dir / "lat.h5";
  o.vae = vae;
  o.size = 16;
  prepare_image_latents(o);
  const h5::File f = h5::File::open_read(o.out);
  ASSERT_TRUE(f.has_attr("/", "vae_assumed"));
  EXPECT_NE(f.attr_string("/", "vae_assumed").find("assumed: 32 norm groups and scaling_factor 0.18215"),
            std::string::npos) << f.attr_string("/", "vae_assumed");
  EXPECT_NE(f.attr_string("/", "vae").find("architecture from the tensor shapes; assumed"), std::string::npos);
  io_test::Scratch other("vae_given");
  const h5::File given = h5::File::open_read(prepare_one_picture(other, ""));  // the tiny VAE, its config.json beside it
  EXPECT_FALSE(given.has_attr("/", "vae_assumed"));
}

// A VAE with a shift_factor (SD3/Flux-style normalisation): the file records it as latent_shift and
// training is served (mean - shift) * scale, the VAE's own scale and shift.
TEST(vae_latents, ShiftedVaeIsServedShiftedThenScaled) {
  io_test::Scratch dir("vae_shift");
  const std::string config = edited_vae_config(
      dir, {{"\"scaling_factor\": 0.18215", "\"scaling_factor\": 0.3611"}, {"\"shift_factor\": null", "\"shift_factor\": 0.1159"}});
  H5Dataset data(prepare_one_picture(dir, config));
  EXPECT_DOUBLE_EQ(data.latent_scale(), 0.3611);
  EXPECT_DOUBLE_EQ(data.latent_shift(), 0.1159);
  const std::vector<float> m = moments_by_hand(open_vae(kTinyVae, config), dir / "imgs/a/1.png");
  std::vector<float> served(4 * 8 * 8);
  data.get(0, served.data());
  for (int j = 0; j < 4 * 8 * 8; ++j)
    ASSERT_EQ(served[std::size_t(j)], (m[std::size_t(j)] - 0.1159f) * 0.3611f) << "value " << j;
}

// A VAE with per-channel latents_mean and latents_std (diffusers' SDXL convention): the file records
// them, training is served (mean - mean_c) * scale / std_c, and decoding the served latent undoes
// it: the same picture as decoding the encoder's mean with no normalisation at all.
TEST(vae_latents, PerChannelMeanAndStdAreServedAndUndoneByTheDecoder) {
  io_test::Scratch dir("vae_channel_stats");
  const double mean[4] = {0.1, -0.2, 0.3, 0.05}, std[4] = {0.9, 1.1, 0.7, 1.3};
  const std::string config = edited_vae_config(dir, {{"\"scaling_factor\": 0.18215", "\"scaling_factor\": 0.5"},
                                                     {"\"latents_mean\": null", "\"latents_mean\": [0.1, -0.2, 0.3, 0.05]"},
                                                     {"\"latents_std\": null", "\"latents_std\": [0.9, 1.1, 0.7, 1.3]"}});
  H5Dataset data(prepare_one_picture(dir, config));
  ASSERT_EQ(data.latent_mean().size(), 4u);
  ASSERT_EQ(data.latent_std().size(), 4u);
  const VaeFile vae = open_vae(kTinyVae, config);
  const std::vector<float> m = moments_by_hand(vae, dir / "imgs/a/1.png");
  std::vector<float> served(4 * 8 * 8);
  data.get(0, served.data());
  for (int c = 0; c < 4; ++c)
    for (int j = 0; j < 64; ++j)
      ASSERT_EQ(served[std::size_t(c * 64 + j)], (m[std::size_t(c * 64 + j)] - 0.0f - float(mean[c])) * float(0.5 / std[c]))
          << "channel " << c << " value " << j;
  VaeFile plain = vae;  // the same weights, latents read as they are
  plain.latents_mean.clear();
  plain.latents_std.clear();
  plain.scaling_factor = 1.0;
  const std::vector<float> got = decode_latents(vae, "cpu", served, 1, 8, 8, 1);
  const std::vector<float> want = decode_latents(plain, "cpu", std::vector<float>(m.begin(), m.begin() + 256), 1, 8, 8, 1);
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    diff += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    norm += double(want[i]) * want[i];
  }
  EXPECT_LT(std::sqrt(diff / norm), 1e-5) << "decoding the served latent does not undo the normalisation";
  // A config whose statistics do not fit the latents is refused naming the key.
  const std::string bad = edited_vae_config(dir, {{"\"latents_mean\": null", "\"latents_mean\": [0.1]"},
                                                  {"\"latents_std\": null", "\"latents_std\": [1.0]"}});
  EXPECT_NE(io_test::error_of([&] { open_vae(kTinyVae, bad); }).find("latents_mean must be a list of 4 numbers"),
            std::string::npos);
}

}  // namespace dit
