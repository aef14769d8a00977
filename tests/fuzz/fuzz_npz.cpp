// Fuzz target: the .npz reader of FID reference statistics (zip directory, stored and deflated
// members, .npy headers), through load_reference_npz as `dit_mp evaluate --reference-stats` calls it.
#include "core/error.h"
#include "eval/inception.h"
#include "fuzz_target.h"
#include "io/npz.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = dit::fuzz::scratch_path("stats.npz");
  dit::fuzz::write_file(path, data, size);
  try {
    dit::npz::keys(path);
  } catch (const dit::Error&) {
  }
  try {  // the corpus files hold mu (4,) and sigma (4, 4)
    dit::eval::load_reference_npz(path, 4);
  } catch (const dit::Error&) {
  }
  return 0;
}
