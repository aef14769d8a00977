// Fuzz target: the TOML run configuration (toml11 parse, typed fields, validate) and `--set`.
#include "core/error.h"
#include "fuzz_target.h"
#include "io/config.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    dit::RunConfig c = dit::RunConfig::from_toml(text, "fuzz.toml");
    c.to_toml();
  } catch (const dit::Error&) {
  }
  try {  // the same bytes as a --set assignment on the demo config
    dit::RunConfig c = dit::RunConfig::demo();
    c.set(text.substr(0, text.find('\n')));
    c.validate();
  } catch (const dit::Error&) {
  }
  return 0;
}
