// Shared pieces of the reader fuzz targets. Each target defines LLVMFuzzerTestOneInput and feeds
// the bytes to one reader the way a user's file would reach it; a dit::Error is the expected
// answer to bad bytes (one message), anything else (a crash, an abort, another exception
// escaping) is a finding. The same targets build with libFuzzer (clang, scripts/fuzz.sh) or with
// standalone_main.cpp (any compiler; what CI runs for a fixed number of inputs).
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace dit::fuzz {

// A scratch path on a memory file system (HDF5 readers need a file), unique per process.
inline std::string scratch_path(const std::string& name) {
  static const std::string dir = [] {
    const char* shm = "/dev/shm";
    return std::string(::access(shm, W_OK) == 0 ? shm : "/tmp");
  }();
  return dir + "/dit_fuzz_" + std::to_string(::getpid()) + "_" + name;
}

inline void write_file(const std::string& path, const std::uint8_t* data, std::size_t size) {
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
}

}  // namespace dit::fuzz
