// Fuzz target: the HDF5 dataset reader (schema checks, then samples read by index).
#include <algorithm>
#include <vector>

#include "core/error.h"
#include "fuzz_target.h"
#include "io/h5_dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = dit::fuzz::scratch_path("dataset.h5");
  dit::fuzz::write_file(path, data, size);
  try {
    const auto ds = dit::open_dataset(path);
    ds->describe();
    const std::int64_t numel = ds->shape().numel();
    if (numel > 0 && numel <= (1 << 22)) {
      std::vector<float> sample(static_cast<std::size_t>(numel));
      for (std::int64_t i : {std::int64_t{0}, ds->size() / 2, ds->size() - 1})
        if (i >= 0 && i < ds->size()) ds->get(i, sample.data());
    }
  } catch (const dit::Error&) {
  }
  ::unlink(path.c_str());
  return 0;
}
