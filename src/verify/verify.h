// Golden verification (`dit_mp verify`): runs what a golden file holds (float64 numbers from the
// official DiT code) at any layout and prints one row per tensor: name, relative L2 error,
// tolerance, PASS/FAIL.
// Under mpirun every rank computes its share (its stage, its tp slices, its dp samples and ZeRO
// shard); errors are summed over ranks, so a row covers the whole tensor.
#pragma once

#include <string>
#include <vector>

#include "layers/dit_stage.h"
#include "parallel/grid.h"
#include "parallel/pipeline_schedule.h"

namespace dit {

struct VerifyOptions {
  std::string golden;
  std::vector<std::string> groups;  // empty: every group the file holds
  std::string backend = "cpu";
  std::string precision = "fp32";   // fp32 | bf16 | fp16 (bf16/fp16: tolerance 2e-2)
  int microbatches = 1;             // per dp rank, for the forward and loss groups
  ScheduleKind schedule = ScheduleKind::OneFOneB;
  int virtual_stages = 1;           // model chunks per pipeline rank (> 1: interleaved 1F1B)
  StageOptions stage;               // recomputation (and sequence parallelism) in the pipeline runs
};

// All groups verify knows, in the order they run.
const std::vector<std::string>& verify_group_names();

// Checks the file, groups and layout before any communication (throws naming what is wrong).
void check_verify_inputs(const VerifyOptions& opt, const Layout& layout);

// Returns the process exit code: 0 when every row passes. Rank 0 prints. Sets up the ranks at
// `layout` (engine/rank_backend.h: make_rank).
int run_verify(const VerifyOptions& opt, const Layout& layout);
// On one rank.
int run_verify(const VerifyOptions& opt);

}  // namespace dit
