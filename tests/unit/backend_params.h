// The backends a conformance suite runs on (every one this project has; "cuda*" skip, saying why,
// where no GPU is visible) and their GoogleTest names: letters, digits and '_' only, so
// "cuda:bf16" is reported as cuda_bf16.
#pragma once

#include <cctype>
#include <string>

#include <gtest/gtest.h>

namespace dit {

inline auto all_backends() {
  return ::testing::Values(std::string("cpu"), std::string("cpu:bf16"), std::string("cpu:fp16"),
                           std::string("cuda"), std::string("cuda:bf16"), std::string("cuda:fp16"));
}

inline std::string backend_test_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;
  for (char& ch : name)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return name;
}

}  // namespace dit
