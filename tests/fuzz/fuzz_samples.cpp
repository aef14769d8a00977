// Fuzz target: the samples-file reader (shapes, labels, finiteness), as `dit_mp evaluate --samples`
// reads a file that dit_mp sample or another tool wrote.
#include "core/error.h"
#include "fuzz_target.h"
#include "io/sample_file.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = dit::fuzz::scratch_path("samples.h5");
  dit::fuzz::write_file(path, data, size);
  try {
    dit::read_samples_h5(path);
  } catch (const dit::Error&) {
  }
  ::unlink(path.c_str());
  return 0;
}
