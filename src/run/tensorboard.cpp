// TensorBoard event files (see tensorboard.h).
#include "run/tensorboard.h"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "io/file_safety.h"
#include "run/log.h"

namespace dit {

namespace {

// The reflected Castagnoli polynomial's table.
std::array<std::uint32_t, 256> crc32c_table() {
  std::array<std::uint32_t, 256> t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}

// ---- the protobuf wire format: what the Event schema uses of it --------------------------------
enum Wire : int { kVarint = 0, kFixed64 = 1, kBytes = 2, kFixed32 = 5 };

void varint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>(v | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}
void key(std::string& out, int field, Wire wire) { varint(out, (std::uint64_t(field) << 3) | wire); }
void varint_field(std::string& out, int field, std::uint64_t v) {
  key(out, field, kVarint);
  varint(out, v);
}
void bytes_field(std::string& out, int field, const std::string& bytes) {
  key(out, field, kBytes);
  varint(out, bytes.size());
  out += bytes;
}
template <typename T>
void little_endian(std::string& out, T v) {  // the host is little-endian (x86-64, arm64)
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}
void double_field(std::string& out, int field, double v) {
  key(out, field, kFixed64);
  little_endian(out, v);
}
void float_field(std::string& out, int field, float v) {
  key(out, field, kFixed32);
  little_endian(out, v);
}

// Summary{value: [v]} as Event field 5.
std::string summary_of(const std::string& value) {
  std::string summary;
  bytes_field(summary, 1, value);
  std::string body;
  bytes_field(body, 5, summary);
  return body;
}

double wall_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

std::uint32_t crc32c(const void* data, std::size_t n) {
  static const std::array<std::uint32_t, 256> table = crc32c_table();
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint32_t c = 0xFFFFFFFFu;
  for (std::size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

std::uint32_t masked_crc32c(const void* data, std::size_t n) {
  const std::uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir, std::int64_t first_step) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  DIT_CHECK(!ec, "train.tensorboard: cannot create ", dir, ": ", ec.message());
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  const auto seconds = static_cast<long long>(wall_time());
  path_ = (std::filesystem::path(dir) / ("events.out.tfevents." + std::to_string(seconds) + "." + host + "." +
                                         std::to_string(getpid()) + ".dit_mp"))
              .string();
  f_ = std::fopen(path_.c_str(), "wb");
  DIT_CHECK(f_ != nullptr, "train.tensorboard: cannot create ", path_, ": ", std::strerror(errno));
  std::string version;
  bytes_field(version, 3, "brain.Event:2");
  write_event(0, version);
  if (first_step > 1) {
    std::string log, body;
    varint_field(log, 1, 1);  // SessionLog.status = START
    bytes_field(body, 7, log);  // Event.session_log
    write_event(first_step, body);
  }
}

TensorBoardWriter::~TensorBoardWriter() {
  if (f_) std::fclose(f_);
}

void TensorBoardWriter::scalar(const std::string& tag, std::int64_t step, double value) {
  std::string v;
  bytes_field(v, 1, tag);
  float_field(v, 2, static_cast<float>(value));
  write_event(step, summary_of(v));
}

void TensorBoardWriter::image(const std::string& tag, std::int64_t step, const std::string& png, int width,
                              int height, int channels) {
  std::string img, v;
  varint_field(img, 1, static_cast<std::uint64_t>(height));
  varint_field(img, 2, static_cast<std::uint64_t>(width));
  varint_field(img, 3, static_cast<std::uint64_t>(channels));
  bytes_field(img, 4, png);
  bytes_field(v, 1, tag);
  bytes_field(v, 4, img);
  write_event(step, summary_of(v));
}

void TensorBoardWriter::text(const std::string& tag, std::int64_t step, const std::string& text) {
  std::string plugin, metadata, shape, tensor, v;
  bytes_field(plugin, 1, "text");     // PluginData.plugin_name
  bytes_field(metadata, 1, plugin);   // SummaryMetadata.plugin_data
  varint_field(tensor, 1, 7);         // TensorProto.dtype = DT_STRING
  bytes_field(tensor, 2, shape);      // a scalar: a TensorShapeProto without dims
  bytes_field(tensor, 8, text);       // string_val
  bytes_field(v, 1, tag);
  bytes_field(v, 8, tensor);
  bytes_field(v, 9, metadata);
  write_event(step, summary_of(v));
}

void TensorBoardWriter::write_event(std::int64_t step, const std::string& body) {
  std::string event;
  double_field(event, 1, wall_time());
  if (step != 0) varint_field(event, 2, static_cast<std::uint64_t>(step));
  event += body;
  std::string record;
  little_endian(record, static_cast<std::uint64_t>(event.size()));
  little_endian(record, masked_crc32c(record.data(), 8));
  record += event;
  little_endian(record, masked_crc32c(event.data(), event.size()));
  const bool ok = std::fwrite(record.data(), 1, record.size(), f_) == record.size() && std::fflush(f_) == 0;
  DIT_CHECK(ok, "train.tensorboard: cannot write ", path_, ": ", std::strerror(errno),
            " (set train.tensorboard = false to train without it)");
}

void tensorboard_scalars(TensorBoardWriter& tb, const LogRow& r) {
  const std::pair<std::string, double> values[] = {
      {"loss", r.loss},         {"mse", r.mse},
      {r.second_name, r.second}, {"grad_norm", r.grad_norm},
      {"lr", r.lr},             {"images_per_s", r.images_per_s},
      {"tflops", r.tflops},     {"mfu", r.mfu},
      {"peak_mem_bytes", static_cast<double>(r.peak_mem_bytes)},
      {"elapsed_s", r.elapsed_s}, {"loss_scale", r.loss_scale},
      {"skipped_steps", static_cast<double>(r.skipped_steps)}};
  for (const auto& [name, value] : values) tb.scalar("train/" + name, r.step, value);
  for (const auto& [name, value] : r.terms) tb.scalar("train/" + name, r.step, value);
}

void tensorboard_grid(TensorBoardWriter& tb, const std::string& tag, std::int64_t step, const std::string& png_path) {
  const std::string png = read_regular(png_path, "the sample grid");  // the one checked opener
  // The signature, then IHDR: length, type, width and height (big-endian), bit depth, colour type.
  DIT_CHECK(png.size() >= 26 && png.compare(12, 4, "IHDR") == 0, png_path, " is not a PNG dit_mp wrote");
  auto be32 = [&](std::size_t at) {
    return int((std::uint8_t(png[at]) << 24) | (std::uint8_t(png[at + 1]) << 16) | (std::uint8_t(png[at + 2]) << 8) |
               std::uint8_t(png[at + 3]));
  };
  const int colour = std::uint8_t(png[25]);
  const int channels = colour == 0 ? 1 : colour == 4 ? 2 : colour == 2 ? 3 : 4;
  tb.image(tag, step, png, be32(16), be32(20), channels);
}

}  // namespace dit
