// The safetensors reader against files written byte by byte here: every float dtype read back
// exactly, the metadata kept, and each way a downloaded file can be wrong refused with one message
// naming the file and the tensor (truncated header, header past the end, data offsets past the end,
// overlapping or gapped ranges, trailing bytes, a dtype it does not read, a byte count that does
// not match the shape, a shape the caller did not expect, a missing tensor, a folder or FIFO).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "io/safetensors.h"
#include "io_test_util.h"

namespace dit {
namespace {

using io_test::Scratch;

// A file of `header` (as given) and `data`, with the 8-byte length in front; `length` overrides it.
std::string write_st(const Scratch& dir, const std::string& name, const std::string& header,
                     const std::vector<unsigned char>& data, std::int64_t length = -1) {
  const std::string path = dir / name;
  std::ofstream out(path, std::ios::binary);
  std::uint64_t n = length < 0 ? header.size() : static_cast<std::uint64_t>(length);
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xFF));
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  return path;
}

template <typename T>
void append(std::vector<unsigned char>& data, T v) {
  unsigned char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  data.insert(data.end(), b, b + sizeof(T));
}

// The refusal's message, or "" when nothing was refused.
std::string refusal(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Safetensors, ReadsEveryFloatDtypeAndTheMetadata) {
  Scratch dir("st_read");
  std::vector<unsigned char> data;
  const float f32[] = {1.5f, -2.25f, 3.0f, 0.0f, 1e-3f, 7.0f};
  for (float v : f32) append(data, v);                                     // [0, 24)
  for (float v : {0.5f, -1.0f}) append(data, float_to_f16_bits(v));         // [24, 28)
  for (float v : {2.0f, -0.125f, 3.5f}) append(data, float_to_bf16_bits(v));  // [28, 34)
  append(data, 0.1);                                                        // [34, 42)
  const std::string header =
      R"({"__metadata__":{"format":"pt","note":"caf\u00e9 \"q\""},)"
      R"("enc.w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
      R"("h":{"dtype":"F16","shape":[2],"data_offsets":[24,28]},)"
      R"("b":{"dtype":"BF16","shape":[3],"data_offsets":[28,34]},)"
      R"("s":{"dtype":"F64","shape":[],"data_offsets":[34,42]}}   )";  // trailing spaces: allowed padding
  const SafetensorsFile f(write_st(dir, "ok.safetensors", header, data));
  ASSERT_EQ(f.tensors().size(), 4u);
  EXPECT_EQ(f.tensors()[0].name, "enc.w");  // in the order of their data
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.metadata().at("note"), "caf\xc3\xa9 \"q\"");
  EXPECT_EQ(f.at("enc.w").shape_text(), "(2, 3)");
  EXPECT_EQ(f.read_f32("enc.w", {2, 3}), std::vector<float>(std::begin(f32), std::end(f32)));
  EXPECT_EQ(f.read_f32("h"), (std::vector<float>{0.5f, -1.0f}));
  EXPECT_EQ(f.read_f32("b"), (std::vector<float>{2.0f, -0.125f, 3.5f}));
  EXPECT_EQ(f.read_f32("s"), (std::vector<float>{0.1f}));
  EXPECT_EQ(f.at("s").numel(), 1);
}

TEST(Safetensors, RefusesTruncatedOrForeignHeaders) {
  Scratch dir("st_header");
  const std::string ok = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  const std::vector<unsigned char> four(4, 0);
  struct Case {
    const char* what;
    std::string path;
    const char* expect;
  };
  std::string deep;
  for (int i = 0; i < 200; ++i) deep += "{\"a\":";
  deep += "1" + std::string(200, '}');
  const std::string short_file = dir / "short.safetensors";
  std::ofstream(short_file, std::ios::binary) << "abc";
  const Case cases[] = {
      {"shorter than the length", short_file, "shorter than a safetensors file's 8-byte header length"},
      {"header past the end", write_st(dir, "past.safetensors", ok.substr(0, 20), {}, static_cast<std::int64_t>(ok.size())),
       "does not fit the"},
      {"huge header length", write_st(dir, "huge.safetensors", ok, four, 1'000'000'000'000), "over the format's"},
      {"not JSON", write_st(dir, "notjson.safetensors", "{\"a\":{\"dtype\":F32}}", four), "not valid JSON"},
      {"not an object", write_st(dir, "array.safetensors", "[1,2]", {}), "does not start with '{'"},
      {"deep nesting", write_st(dir, "deep.safetensors", deep, {}), "nested deeper"},
      {"unclosed string", write_st(dir, "open.safetensors", "{\"a", {}), "not closed"},
      {"duplicate", write_st(dir, "dup.safetensors", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                                     R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                             std::vector<unsigned char>(8, 0)),
       "tensor a appears twice"},
      {"unknown field", write_st(dir, "field.safetensors",
                                 R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}})", four),
       "unknown field \"x\""},
  };
  for (const Case& c : cases) {
    const std::string msg = refusal([&] { SafetensorsFile f(c.path); });
    EXPECT_NE(msg.find(c.expect), std::string::npos) << c.what << ": " << msg;
    EXPECT_NE(msg.find(c.path), std::string::npos) << c.what << " does not name the file: " << msg;
  }
}

TEST(Safetensors, RefusesOffsetsShapesAndDtypesThatDoNotFit) {
  Scratch dir("st_offsets");
  const std::vector<unsigned char> eight(8, 0);
  const auto one = [&](const std::string& name, const std::string& header, std::size_t bytes = 8) {
    return write_st(dir, name, header, std::vector<unsigned char>(bytes, 0));
  };
  struct Case {
    std::string path;
    const char* expect;
  };
  const Case cases[] = {
      {one("past.st", R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})"),
       "tensor a data_offsets [0, 16] run past the 8 bytes of data"},
      {one("overlap.st", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                         R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})"),
       "overlap the tensor before"},
      {one("gap.st", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})"), "leave a gap"},
      {one("trailing.st", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})"),
       "4 bytes of data after the last tensor"},
      {one("count.st", R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})"),
       "tensor a: F32 (3,) needs 12 bytes, data_offsets [0, 8] give 8"},
      {one("fp8.st", R"({"a":{"dtype":"F8_E4M3","shape":[8],"data_offsets":[0,8]}})"),
       "tensor a: dtype F8_E4M3 is not one dit_mp reads"},
      {one("negative.st", R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})"), "expected a whole number >= 0"},
      {one("backwards.st", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})"), "end before they begin"},
      {one("overflow.st", R"({"a":{"dtype":"F32","shape":[1048576,1048576,1048576],"data_offsets":[0,8]}})"),
       "more than 2^50 elements"},
      {one("bigoffset.st", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,99999999999999999999]}})"),
       "expected at most"},
  };
  for (const Case& c : cases) {
    const std::string msg = refusal([&] { SafetensorsFile f(c.path); });
    EXPECT_NE(msg.find(c.expect), std::string::npos) << c.path << ": " << msg;
  }
  const SafetensorsFile f(one("ints.st", R"({"ids":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})"));
  EXPECT_NE(refusal([&] { f.read_f32("ids"); }).find("tensor ids is I64, expected F32, F16, BF16 or F64"),
            std::string::npos);
  EXPECT_NE(refusal([&] { f.read_f32("ids2"); }).find("has no tensor ids2 (it has 1 tensors, e.g. ids)"),
            std::string::npos);
  const SafetensorsFile g(one("shape.st", R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})"));
  EXPECT_NE(refusal([&] { g.read_f32("w", {1, 2}); }).find("tensor w has shape (2,), expected (1, 2)"),
            std::string::npos);
  EXPECT_EQ(refusal([&] { g.read_f32("w", {2}); }), "");
}

// A tensor name read from the file is escaped in a message (issue 52): a NUL in it ("x\u0000y")
// does not cut the message short, and a newline does not start a second line.
TEST(Safetensors, NamesWithControlCharactersAreEscapedInMessages) {
  Scratch dir("st_names");
  const std::string nul = write_st(dir, "nul.st", R"({"x\u0000y":{"dtype":"F8_E4M3","shape":[4],"data_offsets":[0,4]}})",
                                   std::vector<unsigned char>(4, 0));
  const std::string e = refusal([&] { SafetensorsFile f(nul); });
  EXPECT_NE(e.find("tensor \"x\\u0000y\": dtype F8_E4M3 is not one dit_mp reads"), std::string::npos) << e;
  const std::string line = write_st(dir, "nl.st", R"({"a\nb":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                                  R"("a\nb":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                                    std::vector<unsigned char>(8, 0));
  const std::string twice = refusal([&] { SafetensorsFile f(line); });
  EXPECT_NE(twice.find("tensor \"a\\u000ab\" appears twice"), std::string::npos) << twice;
  EXPECT_EQ(twice.find('\n'), std::string::npos) << twice;
}

TEST(Safetensors, RefusesAFolderAndAFifoBeforeReading) {
  Scratch dir("st_kinds");
  EXPECT_NE(refusal([&] { SafetensorsFile f(dir.path.string()); }).find("is not a regular file"), std::string::npos);
  const std::string fifo = dir / "pipe.safetensors";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_NE(refusal([&] { SafetensorsFile f(fifo); }).find("is not a regular file"), std::string::npos);
  EXPECT_NE(refusal([&] { SafetensorsFile f(dir / "none.safetensors"); }).find("does not exist"), std::string::npos);
}

}  // namespace
}  // namespace dit
