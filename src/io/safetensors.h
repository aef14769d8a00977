// safetensors files, the format Hugging Face models and VAEs are downloaded in: an 8-byte
// little-endian header length N, N bytes of JSON naming each tensor's dtype, shape and byte range,
// then the raw little-endian data. A downloaded file is untrusted: the header's length, every
// tensor's dtype, shape and offsets are checked against the file before any data is read (the
// data ranges must tile the data exactly, as the format's own reader requires), and each refusal
// is one line naming the file, the tensor and what was expected.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace dit {

// The element types of the format ("F32", "BF16", ...). Others (the 8-bit floats) are refused.
enum class StDtype : std::uint8_t { F64, F32, F16, BF16, I64, I32, I16, I8, U8, Bool };
const char* st_dtype_name(StDtype t);

struct StTensor {
  std::string name;
  StDtype dtype = StDtype::F32;
  std::vector<std::int64_t> shape;  // () for a scalar
  std::uint64_t begin = 0;          // byte range within the data, after the header
  std::uint64_t end = 0;
  std::int64_t numel() const;
  std::string shape_text() const;   // "(128, 3, 3, 3)"
};

class SafetensorsFile {
 public:
  // Reads and checks the header; throws naming `path` and what is wrong.
  explicit SafetensorsFile(const std::string& path);

  const std::string& path() const { return path_; }
  const std::vector<StTensor>& tensors() const { return tensors_; }  // in the order of their data
  const std::map<std::string, std::string>& metadata() const { return metadata_; }  // __metadata__
  const StTensor* find(const std::string& name) const;
  // The tensor named; a missing one throws naming it, the file and how many tensors it has.
  const StTensor& at(const std::string& name) const;

  // The tensor's values as float32 (F32, F16, BF16 and F64 are converted; integers are refused).
  // `want`, when not empty, is the shape the caller needs: another shape throws naming both.
  std::vector<float> read_f32(const std::string& name, const std::vector<std::int64_t>& want = {}) const;

  static constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;  // as the format's own reader

 private:
  std::string path_;
  std::uint64_t data_offset_ = 0;  // 8 + N
  std::vector<StTensor> tensors_;
  std::map<std::string, std::size_t> index_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace dit
