// Parsing of dtype names used by configs and the command line.
#include "core/dtype.h"

namespace dit {

DType parse_dtype(std::string_view name) {
  if (name == "fp32" || name == "f32" || name == "float32") return DType::F32;
  if (name == "bf16" || name == "bfloat16") return DType::BF16;
  if (name == "fp16" || name == "f16" || name == "float16") return DType::F16;
  DIT_FAIL("unknown precision '", name, "': expected one of fp32, bf16, fp16");
}

}  // namespace dit
