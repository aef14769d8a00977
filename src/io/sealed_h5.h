// Sealed HDF5 files: an HDF5 file whose first 512 bytes (an HDF5 user block, which HDF5 and h5py
// skip) hold a short text header with the size and CRC-32 of everything after it. Readers check
// the seal before HDF5 parses a byte, because HDF5 itself can crash on damaged structure (its
// global heap and, in the older formats, all metadata are unchecksummed); the fuzz targets found
// such crashes in weights and dataset files. Weights files and prepared datasets are sealed.
//   dit_mp sealed hdf5 1
//   size <bytes after the user block>
//   crc32 <8 hex digits>
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <string>

namespace dit::h5 {

inline constexpr hsize_t kSealBytes = 512;

// A file-creation property list reserving the user block for the seal.
hid_t sealed_fcpl();

// Writes the seal of the closed file `path` (created with sealed_fcpl()) and flushes it.
void seal_file(const std::string& path);
// The same for a whole file held in memory (h5::build_in_memory with a kSealBytes user block).
void seal_image(std::string& bytes, const std::string& where);

// Throws one line naming `path` unless it carries a seal that matches its contents. `remedy`
// says how to get a sealed file (e.g. "re-create it with dit_mp prepare-data").
void verify_seal(const std::string& path, const std::string& remedy);
// The same, returning the CRC-32 the seal records (of everything after the user block).
std::uint32_t verified_crc32(const std::string& path, const std::string& remedy);

}  // namespace dit::h5
