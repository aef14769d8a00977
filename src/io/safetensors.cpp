// safetensors reading (see safetensors.h). The header is parsed by io/json.h's strict reader with its
// depth bounded to what the format needs, so a hostile header cannot exhaust the stack or memory.
#include "io/safetensors.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>
#include <sys/stat.h>

#include "core/dtype.h"
#include "core/error.h"
#include "core/quote.h"
#include "io/json.h"
#include "io/file_safety.h"

namespace dit {

namespace {

// ---- the format ----------------------------------------------------------------------------------
struct DtypeName {
  StDtype t;
  const char* name;
  int size;
};
constexpr DtypeName kDtypes[] = {{StDtype::F64, "F64", 8}, {StDtype::F32, "F32", 4}, {StDtype::F16, "F16", 2},
                                 {StDtype::BF16, "BF16", 2}, {StDtype::I64, "I64", 8}, {StDtype::I32, "I32", 4},
                                 {StDtype::I16, "I16", 2}, {StDtype::I8, "I8", 1}, {StDtype::U8, "U8", 1},
                                 {StDtype::Bool, "BOOL", 1}};

// A non-negative integer of at most `max`, written as JSON digits only.
std::uint64_t as_count(const Json& v, std::uint64_t max, const std::string& what) {
  DIT_CHECK(v.kind == Json::Kind::Number && !v.text.empty() &&
                std::all_of(v.text.begin(), v.text.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
                v.text.size() <= 20,
            what, " = ", v.text.empty() ? "(not a number)" : v.text, ": expected a whole number >= 0");
  std::uint64_t n = 0;
  for (char c : v.text) {
    DIT_CHECK(n <= (max - static_cast<std::uint64_t>(c - '0')) / 10, what, " = ", v.text, ": expected at most ", max);
    n = n * 10 + static_cast<std::uint64_t>(c - '0');
  }
  return n;
}

StTensor parse_tensor(const std::string& file, const std::string& name, const Json& v) {
  const std::string where = file + ": tensor " + shown_name(name);  // a name may hold any character
  DIT_CHECK(v.kind == Json::Kind::Object, where, ": expected an object with dtype, shape and data_offsets");
  const Json *dtype = nullptr, *shape = nullptr, *offsets = nullptr;
  for (std::size_t i = 0; i < v.keys.size(); ++i) {
    const std::string& k = v.keys[i];
    const Json& m = v.items[i];
    if (k == "dtype") dtype = &m;
    else if (k == "shape") shape = &m;
    else if (k == "data_offsets") offsets = &m;
    else DIT_FAIL(where, ": unknown field \"", k, "\" (expected dtype, shape and data_offsets)");
  }
  DIT_CHECK(dtype && shape && offsets, where, ": missing ", !dtype ? "dtype" : !shape ? "shape" : "data_offsets");
  StTensor t;
  t.name = name;
  DIT_CHECK(dtype->kind == Json::Kind::String, where, ": dtype is not a string");
  const auto* d = std::find_if(std::begin(kDtypes), std::end(kDtypes),
                               [&](const DtypeName& x) { return dtype->text == x.name; });
  DIT_CHECK(d != std::end(kDtypes), where, ": dtype ", dtype->text,
            " is not one dit_mp reads (F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL)");
  t.dtype = d->t;
  DIT_CHECK(shape->kind == Json::Kind::Array && shape->items.size() <= 8, where,
            ": shape is not a list of at most 8 dimensions");
  std::uint64_t numel = 1;
  constexpr std::uint64_t kMaxElements = std::uint64_t{1} << 50;
  for (const Json& dim : shape->items) {
    const std::uint64_t n = as_count(dim, kMaxElements, where + " shape dimension");
    DIT_CHECK(n == 0 || numel <= kMaxElements / n, where, ": shape ", "has more than 2^50 elements");
    numel *= n;
    t.shape.push_back(static_cast<std::int64_t>(n));
  }
  DIT_CHECK(offsets->kind == Json::Kind::Array && offsets->items.size() == 2, where,
            ": data_offsets is not a list [begin, end]");
  t.begin = as_count(offsets->items[0], std::numeric_limits<std::uint64_t>::max() / 2, where + " data_offsets begin");
  t.end = as_count(offsets->items[1], std::numeric_limits<std::uint64_t>::max() / 2, where + " data_offsets end");
  DIT_CHECK(t.begin <= t.end, where, ": data_offsets [", t.begin, ", ", t.end, "] end before they begin");
  DIT_CHECK(t.end - t.begin == numel * static_cast<std::uint64_t>(d->size), where, ": ", d->name, " ",
            t.shape_text(), " needs ", numel * static_cast<std::uint64_t>(d->size), " bytes, data_offsets [",
            t.begin, ", ", t.end, "] give ", t.end - t.begin);
  return t;
}

std::uint64_t file_size(const std::string& path) {
  struct stat st {};
  DIT_CHECK(::stat(path.c_str(), &st) == 0, path, " does not exist");
  DIT_CHECK(S_ISREG(st.st_mode), path, " is not a regular file (a safetensors file was expected)");
  return static_cast<std::uint64_t>(st.st_size);
}

}  // namespace

const char* st_dtype_name(StDtype t) {
  for (const DtypeName& d : kDtypes)
    if (d.t == t) return d.name;
  return "?";
}

std::int64_t StTensor::numel() const {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

std::string StTensor::shape_text() const {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  const std::uint64_t size = file_size(path);
  DIT_CHECK(size >= 8, path, ": ", size, " bytes, shorter than a safetensors file's 8-byte header length");
  require_regular(path, "the safetensors file");
  std::ifstream in(path, std::ios::binary);
  DIT_CHECK(in.good(), path, ": cannot be opened for reading");
  unsigned char len[8];
  in.read(reinterpret_cast<char*>(len), 8);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
  DIT_CHECK(n <= kMaxHeaderBytes, path, ": header length ", n, " bytes is over the format's ", kMaxHeaderBytes,
            " (a damaged or non-safetensors file?)");
  DIT_CHECK(n >= 2 && n <= size - 8, path, ": header length ", n, " bytes does not fit the ", size,
            "-byte file (truncated, or not a safetensors file)");
  std::string header(n, '\0');
  in.read(header.data(), static_cast<std::streamsize>(n));
  DIT_CHECK(in.good(), path, ": the header could not be read");
  DIT_CHECK(header[0] == '{', path, ": the header does not start with '{' (not a safetensors file?)");
  const Json doc = parse_json(header, path + ": the safetensors header", " (a damaged or non-safetensors file?)", 8);
  DIT_CHECK(doc.kind == Json::Kind::Object, path, ": the header is not a JSON object");
  data_offset_ = 8 + n;
  for (std::size_t i = 0; i < doc.keys.size(); ++i) {
    const std::string& name = doc.keys[i];
    const Json& v = doc.items[i];
    if (name == "__metadata__") {
      DIT_CHECK(v.kind == Json::Kind::Object, path, ": __metadata__ is not an object of strings");
      for (std::size_t j = 0; j < v.keys.size(); ++j) {
        DIT_CHECK(v.items[j].kind == Json::Kind::String, path, ": __metadata__ ", shown_name(v.keys[j]),
                  " is not a string");
        metadata_[v.keys[j]] = v.items[j].text;
      }
      continue;
    }
    DIT_CHECK(index_.count(name) == 0, path, ": tensor ", shown_name(name), " appears twice in the header");
    index_[name] = tensors_.size();
    tensors_.push_back(parse_tensor(path, name, v));
  }
  // The data ranges tile the data exactly: no overlap, no hole, nothing past the end.
  std::sort(tensors_.begin(), tensors_.end(),
            [](const StTensor& a, const StTensor& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  const std::uint64_t data = size - data_offset_;
  std::uint64_t at = 0;
  for (std::size_t i = 0; i < tensors_.size(); ++i) {
    const StTensor& t = tensors_[i];
    DIT_CHECK(t.end <= data, path, ": tensor ", shown_name(t.name), " data_offsets [", t.begin, ", ", t.end, "] run past the ",
              data, " bytes of data (a truncated file?)");
    DIT_CHECK(t.begin == at, path, ": tensor ", shown_name(t.name), " data_offsets [", t.begin, ", ", t.end, "] ",
              t.begin < at ? "overlap the tensor before" : "leave a gap after the tensor before", " (which ends at ", at,
              ")");
    at = t.end;
    index_[t.name] = i;
  }
  DIT_CHECK(at == data, path, ": ", data - at, " bytes of data after the last tensor (the header does not describe them)");
}

const StTensor* SafetensorsFile::find(const std::string& name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const StTensor& SafetensorsFile::at(const std::string& name) const {
  const StTensor* t = find(name);
  DIT_CHECK(t != nullptr, path_, " has no tensor ", shown_name(name), " (it has ", tensors_.size(), " tensors",
            tensors_.empty() ? "" : ", e.g. " + shown_name(tensors_.front().name), ")");
  return *t;
}

std::vector<float> SafetensorsFile::read_f32(const std::string& name, const std::vector<std::int64_t>& want) const {
  const StTensor& t = at(name);
  if (!want.empty()) {
    StTensor w;
    w.shape = want;
    DIT_CHECK(t.shape == want, path_, ": tensor ", shown_name(name), " has shape ", t.shape_text(), ", expected ", w.shape_text());
  }
  const bool floating = t.dtype == StDtype::F32 || t.dtype == StDtype::F16 || t.dtype == StDtype::BF16 ||
                        t.dtype == StDtype::F64;
  DIT_CHECK(floating, path_, ": tensor ", shown_name(name), " is ", st_dtype_name(t.dtype), ", expected F32, F16, BF16 or F64");
  std::vector<unsigned char> raw(static_cast<std::size_t>(t.end - t.begin));
  std::ifstream in(path_, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(data_offset_ + t.begin));
  in.read(reinterpret_cast<char*>(raw.data()), static_cast<std::streamsize>(raw.size()));
  DIT_CHECK(in.good() || raw.empty(), path_, ": tensor ", shown_name(name), " could not be read (the file changed or is truncated)");
  const std::size_t n = static_cast<std::size_t>(t.numel());
  std::vector<float> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    switch (t.dtype) {
      case StDtype::F32: std::memcpy(&out[i], raw.data() + 4 * i, 4); break;
      case StDtype::F64: {
        double d;
        std::memcpy(&d, raw.data() + 8 * i, 8);
        out[i] = static_cast<float>(d);
        break;
      }
      default: {
        std::uint16_t h;
        std::memcpy(&h, raw.data() + 2 * i, 2);
        out[i] = t.dtype == StDtype::F16 ? f16_bits_to_float(h) : bf16_bits_to_float(h);
      }
    }
  }
  // A NaN or Inf in weights is damage, named here rather than blamed later on what they compute.
  for (std::size_t i = 0; i < n; ++i)
    DIT_CHECK(std::isfinite(out[i]), path_, ": tensor ", shown_name(name), " holds ", std::isnan(out[i]) ? "a NaN" : "an Inf",
              " at element ", i, " of ", n, ": the weights are damaged; download or export them again");
  return out;
}

}  // namespace dit
