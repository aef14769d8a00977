// Fuzz target: opening a checkpoint through its index, as `inspect` and `--resume` do. The input
// is COMPLETE's text, a NUL byte, then index.h5's bytes (a valid shard from the seed corpus lies
// beside them when the input names it); the reader must check the index against the manifest
// before HDF5 parses it, so mutated index bytes are refused by checksum, and mutated manifests
// exercise that gate.
#include <filesystem>

#include "core/error.h"
#include "fuzz_target.h"
#include "io/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace fs = std::filesystem;
  const std::string root = dit::fuzz::scratch_path("ckpt"), dir = root + "/step_00000001";
  fs::create_directories(dir);
  std::size_t split = 0;
  while (split < size && data[split] != 0) ++split;
  dit::fuzz::write_file(dir + "/COMPLETE", data, split);
  const std::size_t rest = split < size ? split + 1 : size;
  dit::fuzz::write_file(dir + "/index.h5", data + rest, size - rest);
  try {
    dit::inspect_checkpoint(dir);
  } catch (const dit::Error&) {
  }
  try {
    dit::latest_checkpoint(root);
    dit::complete_checkpoints(root);
  } catch (const dit::Error&) {
  }
  std::error_code ec;
  fs::remove_all(root, ec);
  return 0;
}
