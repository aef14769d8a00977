// Reading arrays from NumPy's .npz archives (a zip of .npy files, as np.savez and
// np.savez_compressed write them), for FID reference statistics published as mu/sigma. The file is
// untrusted input: every offset and size is checked against the file, compressed members are
// inflated with zlib and CRC-checked, and each error is one line naming the file and the array.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dit::npz {

// One array: little- or big-endian float32 / float64 data in C or Fortran order, returned as
// doubles in C (row-major) order.
struct Array {
  std::vector<std::int64_t> shape;
  std::vector<double> values;
  std::string shape_text() const;  // "(2048, 2048)"
};

// The names of the arrays in the archive (member names without ".npy"), in archive order.
std::vector<std::string> keys(const std::string& path);

// The array `key` (member "<key>.npy"). Throws "<path>: ..." naming the key when it is missing,
// truncated, damaged (CRC mismatch) or of an unsupported kind.
Array read(const std::string& path, const std::string& key);

}  // namespace dit::npz
