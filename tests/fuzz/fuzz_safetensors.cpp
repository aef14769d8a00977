// Fuzz target: the safetensors reader (the header length, the JSON header, every tensor's dtype,
// shape and offsets, then every float tensor's data), as a VAE or model download is read.
#include "core/error.h"
#include "fuzz_target.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = dit::fuzz::scratch_path("model.safetensors");
  dit::fuzz::write_file(path, data, size);
  try {
    const dit::SafetensorsFile f(path);
    for (const dit::StTensor& t : f.tensors())
      if (t.numel() <= 1'000'000) {
        try {
          f.read_f32(t.name);
        } catch (const dit::Error&) {
        }
      }
  } catch (const dit::Error&) {
  }
  ::unlink(path.c_str());
  return 0;
}
