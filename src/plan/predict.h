// The calibrated performance model behind `dit_mp plan --predict`: the step time of a layout from
// the plan's per-stage FLOPs, bytes and call counts (the code's own layer specs, as `dit_mp plan`),
// a link model (bandwidth and latency within a node and across nodes), and the real schedule tables
// simulated event by event (parallel/schedule_sim.h), so the bubble is the tables' own pattern.
// ZeRO (optim.zero, .overlap, .offload): the plan's dp bytes and calls (zero 3's gathers included),
// the share of them the compute hides with optim.overlap on devices (planner.h: dp_exposed_s; on
// shared CPU cores a copy needs the core the compute runs on, so nothing is hidden), offload's PCIe
// and host traffic, and the gradient pages zero 2 and 3 hand back and touch again
// (release_ns_per_byte).
// A model, not a measurement: it leaves out kernel launch and framework overheads beyond one
// per-step constant, and contention other than core sharing.
#pragma once

#include <string>

#include "plan/planner.h"

namespace dit {

struct PredictParams {
  std::string name = "custom";
  double flops_per_s = 1e12;    // sustained FLOP/s of one rank on large GEMMs
  double rows_half = 512;       // GEMM rows (micro-batch x tokens) at which half of that is reached
  int gpus_per_node = 8;        // ranks that share the fast link
  double intra_gbps = 450;      // GB/s one direction within a node
  double inter_gbps = 50;       // GB/s one direction across nodes
  double latency_us = 5;        // per collective call (and per pipeline message unless below)
  double pp_latency_us = -1;    // per pipeline message; < 0: latency_us (on shared CPU cores a
                                // message also waits for its receiver to be scheduled)
  double optimizer_ns_per_param = 0.012;  // AdamW + EMA over one parameter of the ZeRO shard
  double step_overhead_s = 0;   // per step: loss on the host, launches, bookkeeping
  // ZeRO 2 and 3 hand back the gradients a rank does not own each step and touch them again
  // (released_bytes_per_step, planner.h): per byte, the page faults and zeroing on a CPU (0: free)
  double release_ns_per_byte = 0;
  // > 0: several ranks share this many cores (CPU calibration; fractional when other users take
  // some); 0 = a device per rank.
  double cores = 0;
};
// Built-in parameters for a hardware name of the plan's table at `efficiency` of its peak.
PredictParams predict_params_for(const Hardware& hw, DType precision, double efficiency);
// Reads [predict] from a TOML calibration file (keys as the struct's fields); throws naming the file.
PredictParams load_predict_params(const std::string& path);
// The same from the file's text; `path` names it in errors.
PredictParams predict_params_from_toml(const std::string& text, const std::string& path);

struct Prediction {
  double step_s = 0;       // predicted time of one training step
  double pipeline_s = 0;   // forward/backward of every microbatch (simulated makespan)
  double compute_s = 0;    // the busiest rank's compute inside the pipeline (tp collectives included)
  double bubble = 0;       // idle share of the pipeline ranks in the simulation
  double dp_s = 0, optimizer_s = 0;  // dp_s: exposed
  double release_s = 0, offload_s = 0;
  double images_per_s = 0;
};
Prediction predict_step(const LayoutPlan& p, const PredictParams& hw, std::int64_t global_batch,
                        ScheduleKind schedule);
std::string prediction_json(const Prediction& r, const PredictParams& hw);

}  // namespace dit
