// `dit_mp verify`: runs what a golden file holds (float64 numbers from the official DiT code) and
// prints one row per tensor: name, relative L2 error, tolerance, PASS/FAIL.
#pragma once

#include <string>
#include <vector>

namespace dit {

struct VerifyOptions {
  std::string golden;
  std::vector<std::string> groups;  // empty: every group the file holds
  std::string backend = "cpu";
};

// All groups verify knows, in the order they run.
const std::vector<std::string>& verify_group_names();

// Returns the process exit code: 0 when every row passes.
int run_verify(const VerifyOptions& opt);

}  // namespace dit
