// .npz reading (see npz.h). The zip's central directory (found from the end-of-central-directory
// record, zip64 included) gives each member's sizes and method; np.savez stores members
// (method 0) and np.savez_compressed deflates them (method 8, inflated here with zlib). The sizes
// in the central directory are used, not the local headers': numpy's writer leaves 0xFFFFFFFF in
// the local headers of its zip64 members. Only the directory and the requested member are read.
#include "io/npz.h"

#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <fstream>

#include "core/error.h"

namespace dit::npz {

namespace {

constexpr std::uint32_t kEndOfDirectory = 0x06054b50, kZip64End = 0x06064b50, kZip64Locator = 0x07064b50;
constexpr std::uint32_t kDirectoryEntry = 0x02014b50, kLocalHeader = 0x04034b50;
constexpr std::uint32_t kMax32 = 0xFFFFFFFFu;

// A window of the archive in memory, addressed by file offsets, with bounds-checked little-endian
// reads; an out-of-range read is a truncated or damaged file.
struct Bytes {
  std::string path;
  std::uint64_t file_size = 0, base = 0;
  std::vector<unsigned char> data;
  void need(std::uint64_t at, std::uint64_t n, const char* what) const {
    DIT_CHECK(at >= base && at - base <= data.size() && n <= data.size() - (at - base), path,
              ": truncated or damaged .npz (", what, " at byte ", at, " runs past the end of the ", file_size,
              "-byte file or its zip directory)");
  }
  std::uint64_t le(std::uint64_t at, int bytes, const char* what) const {
    need(at, std::uint64_t(bytes), what);
    std::uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | data[at - base + std::uint64_t(i)];
    return v;
  }
  const unsigned char* at(std::uint64_t offset) const { return data.data() + (offset - base); }
};

// The open archive. Only the zip directory and the requested member are read: published reference
// batches can hold gigabytes of images next to their mu and sigma.
class Archive {
 public:
  explicit Archive(const std::string& path) : path_(path), in_(path, std::ios::binary) {
    DIT_CHECK(in_.good(), path, ": cannot open (missing or unreadable); expected a .npz of mu and sigma");
    in_.seekg(0, std::ios::end);
    size_ = std::uint64_t(in_.tellg());
  }
  const std::string& path() const { return path_; }
  std::uint64_t size() const { return size_; }
  Bytes window(std::uint64_t at, std::uint64_t n, const char* what) {
    Bytes b{path_, size_, at, {}};
    DIT_CHECK(at <= size_ && n <= size_ - at, path_, ": truncated or damaged .npz (", what, " at byte ", at,
              " runs past the end of the ", size_, "-byte file)");
    b.data.resize(n);
    in_.seekg(std::streamoff(at));
    in_.read(reinterpret_cast<char*>(b.data.data()), std::streamsize(n));
    DIT_CHECK(in_.good(), path_, ": read error at byte ", at);
    return b;
  }

 private:
  std::string path_;
  std::ifstream in_;
  std::uint64_t size_ = 0;
};

struct Member {
  std::string name;
  std::uint32_t method = 0, crc = 0, flags = 0;
  std::uint64_t compressed = 0, size = 0, local_offset = 0;
};

// Replaces 0xFFFFFFFF fields of a directory entry from its zip64 extra field (id 1).
void apply_zip64(const Bytes& b, std::uint64_t extra, std::uint64_t extra_len, Member& m) {
  std::uint64_t at = extra;
  while (at + 4 <= extra + extra_len) {
    const std::uint64_t id = b.le(at, 2, "extra field"), len = b.le(at + 2, 2, "extra field");
    std::uint64_t p = at + 4;
    if (id == 1) {
      if (m.size == kMax32) m.size = b.le(p, 8, "zip64 size"), p += 8;
      if (m.compressed == kMax32) m.compressed = b.le(p, 8, "zip64 size"), p += 8;
      if (m.local_offset == kMax32) m.local_offset = b.le(p, 8, "zip64 offset");
      return;
    }
    at += 4 + len;
  }
}

// The central directory: its place from the end record (the last 22 bytes unless an archive
// comment of at most 65535 bytes follows; zip64 records when the counts overflow).
Bytes central_directory(Archive& a, std::uint64_t& count) {
  DIT_CHECK(a.size() >= 22, a.path(), ": not a .npz archive (", a.size(), " bytes, too short for a zip file)");
  const std::uint64_t tail_len = std::min<std::uint64_t>(a.size(), 22 + 65535 + 20);
  const Bytes tail = a.window(a.size() - tail_len, tail_len, "end record");
  std::uint64_t end = a.size() - 22;
  while (tail.le(end, 4, "end record") != kEndOfDirectory) {
    DIT_CHECK(end > tail.base, a.path(),
              ": not a .npz archive (no zip end-of-directory record; truncated or not a zip)");
    --end;
  }
  count = tail.le(end + 10, 2, "end record");
  std::uint64_t bytes = tail.le(end + 12, 4, "end record"), offset = tail.le(end + 16, 4, "end record");
  if ((count == 0xFFFF || bytes == kMax32 || offset == kMax32) && end >= tail.base + 20 &&
      tail.le(end - 20, 4, "zip64 locator") == kZip64Locator) {
    const Bytes z = a.window(tail.le(end - 20 + 8, 8, "zip64 locator"), 56, "zip64 end record");
    DIT_CHECK(z.le(z.base, 4, "zip64 end record") == kZip64End, a.path(), ": damaged .npz (bad zip64 end record)");
    count = z.le(z.base + 32, 8, "zip64 end record");
    bytes = z.le(z.base + 40, 8, "zip64 end record");
    offset = z.le(z.base + 48, 8, "zip64 end record");
  }
  return a.window(offset, bytes, "zip directory");
}

std::vector<Member> directory(Archive& a) {
  std::uint64_t count = 0;
  const Bytes b = central_directory(a, count);
  std::vector<Member> members;
  std::uint64_t at = b.base;
  for (std::uint64_t i = 0; i < count; ++i) {
    DIT_CHECK(b.le(at, 4, "directory entry") == kDirectoryEntry, a.path(), ": damaged .npz (directory entry ", i,
              " at byte ", at, " has a bad signature)");
    Member m;
    m.flags = std::uint32_t(b.le(at + 8, 2, "directory entry"));
    m.method = std::uint32_t(b.le(at + 10, 2, "directory entry"));
    m.crc = std::uint32_t(b.le(at + 16, 4, "directory entry"));
    m.compressed = b.le(at + 20, 4, "directory entry");
    m.size = b.le(at + 24, 4, "directory entry");
    const std::uint64_t name_len = b.le(at + 28, 2, "directory entry");
    const std::uint64_t extra_len = b.le(at + 30, 2, "directory entry");
    const std::uint64_t comment_len = b.le(at + 32, 2, "directory entry");
    m.local_offset = b.le(at + 42, 4, "directory entry");
    b.need(at + 46, name_len + extra_len, "member name");
    m.name.assign(reinterpret_cast<const char*>(b.at(at + 46)), name_len);
    apply_zip64(b, at + 46 + name_len, extra_len, m);
    members.push_back(m);
    at += 46 + name_len + extra_len + comment_len;
  }
  return members;
}

std::string key_of(const std::string& member) {
  return member.size() > 4 && member.ends_with(".npy") ? member.substr(0, member.size() - 4) : member;
}

// The member's bytes, inflated if deflated, with the CRC-32 checked.
std::vector<unsigned char> extract(Archive& a, const Member& m, const std::string& key) {
  const std::string where = a.path() + ": array '" + key + "'";
  DIT_CHECK(!(m.flags & 1), where, " is encrypted; expected a plain .npz");
  const Bytes header = a.window(m.local_offset, 30, "local header");
  DIT_CHECK(header.le(m.local_offset, 4, "local header") == kLocalHeader, where, ": damaged .npz (bad local header)");
  const std::uint64_t data = m.local_offset + 30 + header.le(m.local_offset + 26, 2, "local header") +
                             header.le(m.local_offset + 28, 2, "local header");
  const Bytes payload = a.window(data, m.compressed, ("array '" + key + "'").c_str());
  // Deflate expands at most ~1032:1, so a larger claimed size is damage (and is not allocated).
  DIT_CHECK(m.size <= m.compressed * 1032 + 1024, where, ": damaged .npz (", m.compressed, " compressed bytes claim ",
            m.size, ")");
  std::vector<unsigned char> out;
  if (m.method == 0) {
    DIT_CHECK(m.compressed == m.size, where, ": damaged .npz (stored sizes differ)");
    out = payload.data;
  } else if (m.method == 8) {
    out.resize(m.size);
    z_stream z{};
    DIT_CHECK(inflateInit2(&z, -MAX_WBITS) == Z_OK, where, ": zlib cannot start inflating");
    z.next_in = const_cast<unsigned char*>(payload.data.data());
    z.next_out = out.data();
    std::uint64_t in_left = m.compressed;
    int rc = Z_OK;
    while (rc == Z_OK) {  // zlib counts in 32 bits: feed and drain in pieces; no progress ends it
      if (z.avail_in == 0 && in_left > 0) {
        z.avail_in = uInt(std::min<std::uint64_t>(in_left, 1u << 30));
        in_left -= z.avail_in;
      }
      if (z.avail_out == 0) z.avail_out = uInt(std::min<std::uint64_t>(m.size - z.total_out, 1u << 30));
      rc = inflate(&z, Z_NO_FLUSH);
    }
    const std::uint64_t out_done = z.total_out;
    inflateEnd(&z);
    DIT_CHECK(rc == Z_STREAM_END && out_done == m.size, where,
              ": damaged .npz (the compressed data does not inflate to ",
              m.size, " bytes)");
  } else {
    DIT_FAIL(where, " uses zip compression method ", m.method,
             "; expected stored (np.savez) or deflate (np.savez_compressed)");
  }
  const uLong crc = crc32_z(crc32(0L, Z_NULL, 0), out.data(), out.size());
  DIT_CHECK(crc == m.crc, where, ": damaged .npz (CRC-32 mismatch)");
  return out;
}

// The value of `'name': ...` in a .npy header dict, up to the next top-level comma or brace.
std::string header_field(const std::string& header, const std::string& name, const std::string& where) {
  const std::size_t k = header.find("'" + name + "'");
  DIT_CHECK(k != std::string::npos, where, ": the .npy header has no '", name, "' (", header, ")");
  std::size_t p = header.find(':', k);
  DIT_CHECK(p != std::string::npos, where, ": malformed .npy header (", header, ")");
  ++p;
  while (p < header.size() && header[p] == ' ') ++p;
  std::size_t e = p;
  if (p < header.size() && header[p] == '(') e = header.find(')', p) + 1;
  else if (p < header.size() && header[p] == '\'') e = header.find('\'', p + 1) + 1;
  else e = header.find_first_of(",}", p);
  DIT_CHECK(e != std::string::npos && e > p && e <= header.size(), where, ": malformed .npy header (", header, ")");
  return header.substr(p, e - p);
}

std::vector<std::int64_t> parse_shape(const std::string& text, const std::string& where) {
  std::vector<std::int64_t> shape;
  std::size_t p = 1;
  while (p < text.size()) {
    while (p < text.size() && (text[p] == ' ' || text[p] == ',' || text[p] == ')')) ++p;
    if (p >= text.size()) break;
    DIT_CHECK(std::isdigit(static_cast<unsigned char>(text[p])), where, ": malformed shape ", text,
              " in the .npy header");
    std::int64_t v = 0;
    while (p < text.size() && std::isdigit(static_cast<unsigned char>(text[p]))) {
      DIT_CHECK(v < (std::int64_t(1) << 40), where, ": implausible shape ", text);
      v = v * 10 + (text[p++] - '0');
    }
    shape.push_back(v);
  }
  return shape;
}

Array parse_npy(const std::vector<unsigned char>& npy, const std::string& where) {
  static const unsigned char kMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  DIT_CHECK(npy.size() >= 10 && std::memcmp(npy.data(), kMagic, 6) == 0, where, " is not a .npy array");
  const int major = npy[6];
  DIT_CHECK(major >= 1 && major <= 3, where, ": .npy format version ", major, " is not supported (expected 1 to 3)");
  const std::size_t len_bytes = major == 1 ? 2 : 4, start = 8 + len_bytes;
  DIT_CHECK(npy.size() >= start, where, " is truncated");
  std::size_t header_len = 0;
  for (std::size_t i = len_bytes; i-- > 0;) header_len = (header_len << 8) | npy[8 + i];
  DIT_CHECK(header_len <= npy.size() - start, where, " is truncated (in its header)");
  const std::string header(reinterpret_cast<const char*>(npy.data() + start), header_len);
  const std::string descr = header_field(header, "descr", where);
  const bool fortran = header_field(header, "fortran_order", where) == "True";
  Array a;
  a.shape = parse_shape(header_field(header, "shape", where), where);
  DIT_CHECK(descr.size() == 5 && (descr[1] == '<' || descr[1] == '>' || descr[1] == '|') && descr[2] == 'f' &&
                (descr[3] == '4' || descr[3] == '8'),
            where, " holds dtype ", descr, "; expected float32 or float64");
  const std::size_t item = descr[3] == '4' ? 4 : 8;
  const std::uint64_t bytes = npy.size() - start - header_len;
  std::int64_t n = 1;
  for (std::int64_t d : a.shape) {  // bounded by the bytes present, so the product cannot overflow
    DIT_CHECK(d == 0 || std::uint64_t(n) <= bytes / std::uint64_t(d), where, " has ", bytes,
              " data bytes, too few for shape ", a.shape_text());
    n *= d;
  }
  DIT_CHECK(bytes == std::uint64_t(n) * item, where, " has ", bytes, " data bytes for shape ", a.shape_text(), " of ",
            descr, " (", std::uint64_t(n) * item, " expected)");
  const unsigned char* data = npy.data() + start + header_len;
  const bool big = descr[1] == '>';
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    unsigned char raw[8];
    for (std::size_t k = 0; k < item; ++k) raw[k] = data[std::size_t(i) * item + (big ? item - 1 - k : k)];
    if (item == 4) {
      float f;
      std::memcpy(&f, raw, 4);
      v[std::size_t(i)] = f;
    } else {
      std::memcpy(&v[std::size_t(i)], raw, 8);
    }
  }
  if (fortran && a.shape.size() > 1) {  // column-major: the index of element (i0, i1, ...) reverses
    a.values.resize(v.size());
    const std::size_t rank = a.shape.size();
    std::vector<std::int64_t> idx(rank, 0);
    for (std::int64_t c = 0; c < n; ++c) {  // c: C-order position; f: its Fortran-order position
      std::int64_t f = 0;
      for (std::size_t d = rank; d-- > 0;) f = f * a.shape[d] + idx[d];
      a.values[std::size_t(c)] = v[std::size_t(f)];
      for (std::size_t d = rank; d-- > 0;) {
        if (++idx[d] < a.shape[d]) break;
        idx[d] = 0;
      }
    }
  } else {
    a.values = std::move(v);
  }
  return a;
}

}  // namespace

std::string Array::shape_text() const {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

std::vector<std::string> keys(const std::string& path) {
  std::vector<std::string> out;
  Archive a(path);
  for (const Member& m : directory(a)) out.push_back(key_of(m.name));
  return out;
}

Array read(const std::string& path, const std::string& key) {
  Archive a(path);
  const std::vector<Member> members = directory(a);
  std::string have;
  for (const Member& m : members) {
    if (key_of(m.name) == key) return parse_npy(extract(a, m, key), path + ": array '" + key + "'");
    have += (have.empty() ? "" : ", ") + key_of(m.name);
  }
  DIT_FAIL(path, ": no array '", key, "' in the .npz (it holds: ", have.empty() ? "nothing" : have, ")");
}

}  // namespace dit::npz
