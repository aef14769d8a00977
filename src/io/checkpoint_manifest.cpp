// The checkpoint manifest (see checkpoint_manifest.h).
#include "io/checkpoint_manifest.h"

#include <zlib.h>

#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <vector>

#include "core/error.h"
#include "io/checkpoint_format.h"
#include "io/file_safety.h"

namespace dit::ckpt {

FileSum file_sum(const std::string& path) {
  require_regular(path, "the checkpoint's index");
  std::ifstream in(path, std::ios::binary);
  DIT_CHECK(in, path, ": cannot open to checksum it");
  FileSum s;
  uLong crc = crc32(0L, Z_NULL, 0);
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), std::streamsize(buf.size()));
    const std::streamsize n = in.gcount();
    if (n <= 0) break;
    crc = crc32(crc, reinterpret_cast<const Bytef*>(buf.data()), static_cast<uInt>(n));
    s.size += static_cast<std::uint64_t>(n);
  }
  DIT_CHECK(in.eof(), path, ": read error while checksumming it");
  s.crc32 = static_cast<std::uint32_t>(crc);
  return s;
}

std::string complete_text(std::int64_t step, const FileSum& index) {
  char line[96];
  std::snprintf(line, sizeof line, "%s size %" PRIu64 " crc32 %08" PRIx32 "\n", kIndexFile, index.size,
                index.crc32);
  return "step " + std::to_string(step) + "\n" + line;
}

void verify_index_sum(const std::string& dir) {
  const std::string complete = dir + "/" + kCompleteFile, index = dir + "/" + kIndexFile;
  std::string text = read_regular(complete, "the checkpoint's COMPLETE marker");
  text = text.substr(0, text.find('\0'));
  DIT_CHECK(text.size() < 4096, complete, ": ", text.size(), " bytes, expected a few lines (damaged?)");
  const std::string key = std::string(kIndexFile) + " ";
  const auto at = text.find(key);
  // A checkpoint from before the manifest cannot be verified, and HDF5 can hang or crash on a
  // damaged index (the fuzz target found both): refused, saying how to vouch for it.
  DIT_CHECK(at != std::string::npos, complete, " records no checksum of ", kIndexFile,
            " (written by an older dit_mp), so the index cannot be verified before HDF5 reads it; if you "
            "trust it, record one with tools/dit_checkpoint.py seal ", dir);
  unsigned long long size = 0;
  unsigned crc = 0;
  char tail = 0;
  const std::string line = text.substr(at, text.find('\n', at) - at);
  DIT_CHECK(std::sscanf(line.c_str() + key.size(), "size %llu crc32 %8x%c", &size, &crc, &tail) == 2, complete,
            ": the line '", line, "' is damaged (expected 'index.h5 size N crc32 HEX')");
  const FileSum actual = file_sum(index);
  DIT_CHECK(actual.size == size, index, ": ", actual.size, " bytes, but COMPLETE records ", size,
            ": the index is damaged or truncated");
  char have[16], want[16];
  std::snprintf(have, sizeof have, "%08x", actual.crc32);
  std::snprintf(want, sizeof want, "%08x", crc);
  DIT_CHECK(actual.crc32 == crc, index, ": CRC-32 ", have, " does not match ", want,
            " recorded in COMPLETE: the index is damaged");
}

}  // namespace dit::ckpt
