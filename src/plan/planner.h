// `dit_mp plan`: what a layout needs on each rank before anything runs. Each pipeline stage is
// planned by one training step of the real Trainer on the planning backend (backend/virtual: it
// hands out address space and runs no kernel) with virtual communicators that count the bytes
// they would move, so the parameter specs, stage partition, schedule, saved-tensor lists and
// messages are the code's own. `--fit` enumerates layouts for given hardware, keeps those that fit
// and ranks them by a simple time model (a ranking aid, not a measurement).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "backend/virtual/virtual_backend.h"
#include "engine/train_setup.h"
#include "engine/trainer.h"
#include "io/config.h"

namespace dit {

// A GPU (or this machine class's CPU) as the planner sees it. Numbers are the vendors' dense
// peaks; links are per GPU, one direction.
struct Hardware {
  std::string name;
  double memory_gib = 0;      // per device
  double bf16_tflops = 0;     // tensor cores, fp32 accumulation
  double fp32_tflops = 0;     // no TF32
  int gpus_per_node = 8;
  double intra_gbps = 0;      // GB/s within a node (NVLink, or PCIe)
  double inter_gbps = 0;      // GB/s across nodes (InfiniBand)
  double latency_us = 0;      // per collective or message
  // A CPU: the peaks are per core, `cores` of them shared by the node's ranks (one compute thread
  // each); 0 for a GPU (one per rank).
  int cores = 0;
  double gemm_half_rows = 512;  // GEMM rows (micro-batch x tokens) at which it reaches half speed
};
const std::vector<Hardware>& hardware_table();
// Throws naming the known names.
const Hardware& find_hardware(const std::string& name);

struct StagePlan {
  int stage = 0;
  int blocks = 0;
  MemoryAccount mem;
  std::uint64_t tp_bytes = 0, pp_bytes = 0, dp_bytes = 0;  // one step, ring bytes (comm.h)
  std::uint64_t tp_calls = 0, pp_calls = 0, dp_calls = 0;
  double flops = 0;  // one step of this rank, recomputation included
  std::int64_t shard_params = 0;  // the parameters whose optimizer state this rank holds (its ZeRO shard)
};

struct LayoutPlan {
  Layout layout;
  int micro_batch = 0, microbatches = 0;
  int tokens = 0;  // per image
  DType precision = DType::F32;
  Recompute recompute = Recompute::None;
  bool sequence_parallel = false;
  int virtual_stages = 1;
  ScheduleKind schedule = ScheduleKind::OneFOneB;
  int zero = 1;          // optim.zero: what dp shards
  bool offload = false;  // optim.offload = "cpu"
  bool overlap = true;   // optim.overlap
  double largest_tensor = 0;  // elements of the model's largest tensor on one tp rank
  std::vector<StagePlan> stages;  // one per pipeline stage (tp and dp ranks of a stage are alike)
  std::size_t peak_bytes() const;  // the largest total over stages
  std::size_t peak_host_bytes() const;  // the largest offloaded state over stages
  // The most host memory a rank needs, over stages: its offloaded state and what a checkpoint save
  // holds (checkpoint_host_bytes), the check `plan --host-memory-gib` and `--fit` make per node.
  double peak_host_need() const;
};

// One rank of pipeline stage `stage` of `l` (tp and dp rank 0: the others of the stage hold the
// same), with virtual communicators that move nothing and count what they would move.
// `dp_sends`: whether the data-parallel communicator's sends reach every rank (MPI's; false: NCCL's).
ParallelContext planning_context(const Layout& l, int stage, bool dp_sends = true);
// The attention a run on `backend` takes, as the planning backend counts it: the CPU's fused
// kernel unless DIT_ATTENTION=composed; on a GPU the composed attention's workspace (its path
// where cuDNN cannot serve).
VirtualBackend::Attention planned_attention(BackendKind backend);

// A test-only knob of the planner: DIT_PLAN_UNDERCOUNT=F plans every stage's activations at
// (1 - F) of the trainer's own, so a run's plan check (run/plan_check.h) meets a planner that
// under-counts. Unset: 0. Throws naming the variable when it is not a fraction in [0, 1).
double plan_undercount_from_env();

// What a planned step computes on: the backend (its attention path) and the storage precision,
// the two settings of a run the planner needs beyond its TrainSetup.
struct PlanDevice {
  BackendKind backend = BackendKind::Cpu;
  DType precision = DType::F32;
};
PlanDevice plan_device(const RunConfig& cfg);  // train.backend, train.precision

// Plans one training step of `setup` (TrainSetup::make, checked there; not checked again) at its
// layout, on `device`.
LayoutPlan plan_layout(const TrainSetup& setup, const PlanDevice& device);
// A configuration at `layout` (tp and pp from the layout, not from cfg.parallel), for the layout
// search and `dit_mp plan`, which plan configurations: checked (RunConfig::validate_layout, then
// TrainSetup::make: throws on a layout the trainer would refuse, with its own message), then
// planned. A run plans its one TrainSetup with plan_layout.
LayoutPlan plan_config(RunConfig cfg, const Layout& layout);

// The time model: FLOPs at `efficiency` of the peak for the precision (less for GEMMs of few rows:
// x rows / (rows + 512), rows = micro-batch x tokens), the extra forward of
// recomputation, the pipeline bubble (p - 1) / (m + p - 1), and communication from the planned
// bytes over the hardware's links (tp and pp neighbours within a node while the rank grid keeps
// them there; dp across nodes once tp x dp exceeds a node). With optim.overlap, the dp traffic
// the compute can cover is hidden (dp_exposed_s); with optim.offload, offload_s is added.
struct TimeEstimate {
  double step_s = 0, compute_s = 0, bubble_s = 0, comm_s = 0;
};
TimeEstimate estimate_time(const LayoutPlan& p, const Hardware& hw, double efficiency);

// Host bytes one rank holds while it saves a checkpoint of a stage of `stage_params` parameters
// sharded over `dp` ranks (io/checkpoint.h, Trainer::checkpoint_view). With the optimizer state in
// host memory (`state_on_host`: offloaded, or the CPU backend) the shard is written from the
// optimizer's own buffers, and at dp > 1 the values past it of the tensors that start in it are
// gathered (four fp32 kinds: master, two moments, EMA; at most the largest tensor,
// `largest_params`) and one tensor running across is put together (4 bytes a parameter). Else the
// four kinds of the tensors it writes - those starting in its shard: at most the shard and the
// largest tensor running past it, never more than the stage - are gathered (16 bytes a
// parameter). Both: HDF5's buffer for the chunk it checksums; the file goes straight to disk. (A
// load reads its shard alone: less.)
double checkpoint_host_bytes(double stage_params, int dp, double largest_params, bool state_on_host);
// Elements of the largest tensor of `m` one of `tp` ranks holds.
double largest_tensor_params(const DiTConfig& m, int tp);

// The parts of a step that depend on optim.zero, .overlap and .offload, shared by estimate_time
// and the calibrated predictor (predict.h):
// The parameters one rank's AdamW and EMA update: its shard (the same at every zero level).
double optimizer_shard_params(const StagePlan& s);
// The dp traffic `dp_s` leaves exposed beside `compute_s` (one step of the rank's compute): all of
// it without overlap; with overlap the gradient reduction runs behind the backward (2/3 of the
// compute), zero 1 and 2's parameter all-gather (the other half of their dp bytes) behind the next
// step's forward (1/3), and zero 3's gathers behind the forward and backward.
double dp_exposed_s(const LayoutPlan& p, double dp_s, double compute_s);
// Offload (optim.offload = "cpu"): each step moves the shard's fp32 gradients to the host and its
// parameters back over PCIe (~25 GB/s each way), and AdamW streams the host state (~50 GB/s);
// neither overlaps. 0 without offload.
double offload_s(const LayoutPlan& p);
// Bytes of gradient a rank hands back to the allocator and touches again each step at zero 2 and 3
// (the fp32 gradients of the dp - 1 shards it does not own), for which a CPU pays page faults and
// zeroing as the next backward adds into them (predict.h). Zero 3's gathered parameters are handed
// back too, but the gather writes each page whole: measured here, they cost a small part of the
// gradients' (docs/scaling.md), so they are left out.
double released_bytes_per_step(const LayoutPlan& p, const StagePlan& s);

// What the layout search may not change: each field that is set pins that setting (the flags a
// user gave next to --layout auto, e.g. --tp 2).
struct FitConstraints {
  std::optional<int> tp, pp, micro_batch, virtual_stages;
  std::optional<Recompute> recompute;
  std::optional<bool> sequence_parallel;
  std::optional<ScheduleKind> schedule;
  std::optional<int> zero;       // optim.zero
  std::optional<bool> offload;   // optim.offload = "cpu"
};

struct FitRequest {
  RunConfig cfg;                 // model, global batch, and the fixed settings
  Hardware hw;                   // memory and links of one GPU
  int gpus = 1;
  double margin = 0.10;          // of the memory kept free (CUDA context, library workspaces)
  double efficiency = 0.5;       // fraction of peak FLOP/s the time model assumes
  std::vector<DType> precisions = {DType::BF16};
  std::vector<Recompute> recomputes = {Recompute::None, Recompute::Selective, Recompute::Full};
  FitConstraints fixed;
  // What data parallelism shards and whether the optimizer state goes to the host: empty, the
  // configuration's (--layout auto); `plan --fit` tries them all unless the flags pin them.
  std::vector<int> zeros;
  std::vector<bool> offloads;
  double host_memory_gib = 0;    // per node: the offloaded state of its GPUs must fit (0: unchecked)
  double budget_bytes() const;   // hw.memory_gib less the margin
};
struct FitRow {
  LayoutPlan plan;
  TimeEstimate time;
};
struct FitSearch {
  std::vector<FitRow> rows;  // the layouts that fit, fastest first by the time model
  int candidates = 0;        // layouts the trainer accepts, fitting or not
  std::optional<FitRow> smallest;  // the candidate of the smallest peak (when nothing fits)
};
// What a search may choose of the sharding: the ZeRO levels 1-3 on the CPU backend, level 1 for a
// GPU (a CUDA run or GPU hardware: levels 2 and 3 need the CPU backend for now) unless the flags pin
// the level, and on a GPU (whose optimizer state could go to the host) the offload.
void search_sharding(FitRequest& req, bool cuda_run);
// Every layout of `gpus` devices (tp dividing the heads within a node, pp <= depth, every
// micro-batch size dividing the per-replica batch, each precision, recompute mode, sequence
// parallelism, schedule and number of virtual stages) within `req.fixed` that fits, fastest first
// by the time model (ties in the order enumerated).
FitSearch fit_search(const FitRequest& req);
// The grids (tp x pp x dp) of `req.gpus` devices the model, the batch and req.fixed allow.
std::vector<Layout> fit_grids(const FitRequest& req);
std::vector<FitRow> fit_layouts(const FitRequest& req);  // fit_search(req).rows

// Text for people: one row per stage; and the same as JSON.
std::string format_plan(const LayoutPlan& p, const Hardware* hw);
// With hardware, "model_step_s" (the time model at 50% of peak) is added.
std::string plan_json(const LayoutPlan& p, const Hardware* hw = nullptr);
// Writes `text` (a plan's or a fit's JSON) whole or not at all (io/atomic_file.h).
void save_json(const std::string& path, const std::string& text);
// The ranked rows of a fit as a JSON array: each plan_json with "model_step_s" added.
std::string fit_json(const std::vector<FitRow>& rows, int top);
std::string format_fit(const FitRequest& req, const std::vector<FitRow>& rows, int top);
// The table of rows [first, first + count) of a fit, headed, each numbered by its rank.
std::string format_fit_rows(const std::vector<FitRow>& rows, int first, int count);

}  // namespace dit
