// The COMPLETE marker of a checkpoint as a small manifest: the step, and the size and CRC-32 of
// index.h5. HDF5 checksums the shards' data (Fletcher32) and metadata (1.10 format), but not the
// index's global heap (its virtual-dataset mappings and strings), where one flipped bit can crash
// HDF5 itself; so the index is checked whole, before HDF5 parses any of it.
#pragma once

#include <cstdint>
#include <string>

namespace dit::ckpt {

struct FileSum {
  std::uint64_t size = 0;
  std::uint32_t crc32 = 0;
};

// Reads `path` whole; throws naming it when it cannot be read.
FileSum file_sum(const std::string& path);

// "step 12\nindex.h5 size 53232 crc32 1a2b3c4d\n"
std::string complete_text(std::int64_t step, const FileSum& index);

// Checks <dir>/index.h5 against the sum its COMPLETE records. Throws one line naming the index
// (size or checksum mismatch: the index is damaged) or the COMPLETE file (unreadable or missing
// line: a checkpoint from before the manifest is refused, naming tools/dit_checkpoint.py seal).
void verify_index_sum(const std::string& dir);

}  // namespace dit::ckpt
