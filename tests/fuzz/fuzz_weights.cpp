// Fuzz target: the weights-file reader (the /config attributes, then every tensor with its
// checksum and finiteness checks), as `dit_mp sample --weights` and `--init-from` use it.
#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "fuzz_target.h"
#include "io/weights.h"
#include "layers/dit_stage.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = dit::fuzz::scratch_path("weights.h5");
  dit::fuzz::write_file(path, data, size);
  try {
    const dit::DiTConfig cfg = dit::read_weights_config(path);
    dit::read_weights_diffusion_steps(path);
    if (cfg.num_params() <= 4'000'000) {  // a model the fuzzer's memory budget can hold
      dit::CpuBackend be;
      dit::ParamSet ps(be, dit::DiTStage::declare(cfg, dit::StageLayout::whole(cfg)), 1, 0, 1);
      dit::load_weights(path, ps);
    }
  } catch (const dit::Error&) {
  }
  ::unlink(path.c_str());
  return 0;
}
