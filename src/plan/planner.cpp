// Memory plans from the code's own allocations, and the layout search (see plan.h).
#include "plan/planner.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/quote.h"
#include "core/resources.h"
#include "engine/train_setup.h"
#include "backend/attention_path.h"
#include "backend/virtual/virtual_backend.h"
#include "io/dataset.h"
#include "parallel/virtual_comm.h"
#include "io/atomic_file.h"
#include "io/file_roles.h"
#include "io/h5.h"

namespace dit {

const std::vector<Hardware>& hardware_table() {
  // name, GiB, bf16 TFLOP/s, fp32 TFLOP/s, GPUs per node, intra GB/s, inter GB/s, latency us.
  // GeForce cards: bf16 with fp32 accumulation, no NVLink (PCIe 4.0 x16 between GPUs).
  static const std::vector<Hardware> table = {
      {"rtx3090", 24, 71, 35.6, 8, 25, 12.5, 10},
      {"rtx4090", 24, 165, 82.6, 8, 25, 12.5, 10},
      {"a100-40g", 40, 312, 19.5, 8, 300, 25, 5},
      {"a100-80g", 80, 312, 19.5, 8, 300, 25, 5},
      {"h100", 80, 989, 67, 8, 450, 50, 5},
      {"h200", 141, 989, 67, 8, 450, 50, 5},
      // A 2-core Zen 4 machine: ~0.11 TFLOP/s fp32 per core (one compute thread per rank; a
      // 1024^3 sgemm on 2 threads reaches ~0.215), MPI over shared memory; bf16 converts to fp32 for arithmetic, so both peaks are
      // the fp32 one. Its GEMMs keep their speed down to a few rows.
      {"cpu", 24, 0.1075, 0.1075, 64, 5, 1, 5, 2, 16},
  };
  return table;
}

const Hardware& find_hardware(const std::string& name) {
  std::string names;
  for (const Hardware& h : hardware_table()) {
    if (h.name == name) return h;
    names += (names.empty() ? "" : ", ") + h.name;
  }
  DIT_FAIL("unknown hardware '", name, "': expected one of ", names);
}

ParallelContext planning_context(const Layout& l, int stage, bool dp_sends) {
  ParallelContext ctx;
  ctx.layout = l;
  ctx.coord = {0, stage, 0};
  ctx.world_rank = grid_rank(l, ctx.coord);
  ctx.world = std::make_unique<VirtualComm>(l.world(), ctx.world_rank);
  ctx.tp = std::make_unique<VirtualComm>(l.tp, 0);
  ctx.pp = std::make_unique<VirtualComm>(l.pp, stage);
  ctx.dp = std::make_unique<VirtualComm>(l.dp, 0, dp_sends);
  return ctx;
}

VirtualBackend::Attention planned_attention(BackendKind backend) {
  return backend == BackendKind::Cuda || attention_path_from_env() == AttentionPath::Composed
             ? VirtualBackend::Attention::Composed
             : VirtualBackend::Attention::Fused;
}

std::size_t LayoutPlan::peak_bytes() const {
  std::size_t peak = 0;
  for (const StagePlan& s : stages) peak = std::max(peak, s.mem.total());
  return peak;
}

namespace {

// Samples of the right shape and nothing else: a plan needs the batch's shape, not its pixels.
class BlankDataset final : public Dataset {
 public:
  BlankDataset(SampleShape shape, int classes, std::int64_t size)
      : shape_(shape), classes_(classes), size_(size) {}
  std::int64_t size() const override { return size_; }
  SampleShape shape() const override { return shape_; }
  int num_classes() const override { return classes_; }
  int get(std::int64_t index, float* out) const override {
    std::fill(out, out + shape_.numel(), 0.f);
    return static_cast<int>(index % classes_);
  }
  std::string describe() const override { return "blank samples for planning"; }

 private:
  SampleShape shape_;
  int classes_;
  std::int64_t size_;
};

// One rank of stage `s` (tp rank 0, dp rank 0: the others of the stage hold the same).
StagePlan plan_stage(const TrainSetup& setup, DType dtype, VirtualBackend::Attention attention, int s,
                     const Dataset& data, bool dp_sends) {
  const Layout& l = setup.layout;
  const DiTConfig& model = setup.model;
  const TrainConfig& tc = setup.train;
  const std::vector<StageLayout> chunks = setup.stage_chunks(s);
  VirtualBackend be(dtype, attention);
  ParallelContext ctx = planning_context(l, s, dp_sends);
  Trainer trainer(be, ctx, setup, data);
  const StepStats st = trainer.step();
  StagePlan p;
  p.stage = s;
  bool has_embed = false, has_final = false;
  for (const StageLayout& c : chunks) {
    p.blocks += c.end_block - c.first_block;
    has_embed |= c.has_embed;
    has_final |= c.has_final;
  }
  p.mem = trainer.memory();
  p.shard_params = trainer.optimizer().shard_size();
  p.tp_bytes = st.acct.tp_bytes;
  p.pp_bytes = st.acct.pp_bytes;
  p.dp_bytes = st.acct.dp_bytes;
  p.tp_calls = ctx.tp->stats().calls;
  p.pp_calls = ctx.pp->stats().calls;
  p.dp_calls = ctx.dp->stats().calls;
  // Forward 1x, backward 2x, plus the forward again of blocks under full recomputation.
  int recomputed = 0;
  for (const StageLayout& c : chunks)
    for (int b = 0; b < c.end_block - c.first_block; ++b) recomputed += tc.stage.mode_of(b) == Recompute::Full;
  const double block = model.block_flops() / l.tp;
  const double fwd = p.blocks * block + (has_embed ? model.embed_flops() : 0) +
                     (has_final ? model.final_flops() : 0);
  p.flops = double(tc.global_batch / l.dp) * (3 * fwd + recomputed * block);
  return p;
}

std::string gib(double bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", bytes / double(1u << 30));
  return b;
}

}  // namespace

double plan_undercount_from_env() {
  const char* v = std::getenv("DIT_PLAN_UNDERCOUNT");
  if (!v || !*v) return 0;
  char* end = nullptr;
  const double f = std::strtod(v, &end);
  DIT_CHECK(end && *end == '\0' && f >= 0 && f < 1, "DIT_PLAN_UNDERCOUNT=", v,
            ": expected a fraction in [0, 1) (a test of the plan check; leave it unset)");
  return f;
}

PlanDevice plan_device(const RunConfig& cfg) { return {cfg.train.backend, cfg.train.precision}; }

LayoutPlan plan_layout(const TrainSetup& run, const PlanDevice& device) {
  TrainSetup setup = run;  // with a teacher when [distill] names one
  setup.train.steps = 1;
  const Layout& layout = setup.layout;
  const TrainConfig& tc = setup.train;
  const DiTConfig& model = setup.model;
  BlankDataset data({model.in_channels, model.input_size, model.input_size}, model.num_classes,
                    tc.global_batch);
  const VirtualBackend::Attention attention = planned_attention(device.backend);
  LayoutPlan p;
  p.layout = layout;
  p.micro_batch = setup.batch.micro_batch;
  p.microbatches = setup.batch.microbatches;
  p.tokens = model.num_patches();
  p.largest_tensor = largest_tensor_params(model, layout.tp);
  p.precision = device.precision;
  p.recompute = tc.stage.recompute;
  p.sequence_parallel = tc.stage.sequence_parallel;
  p.zero = tc.zero;
  p.offload = tc.offload;
  // The CUDA backend's data-parallel communicator is NCCL's, whose sends reach pipeline neighbours
  // only: level 1 reduces and gathers with its collectives, after the backward and the optimizer
  // (ZeroOptimizer). Levels 2 and 3, which it refuses today, are planned as a transport with sends
  // would run them: what their state would take.
  const bool dp_sends = !(device.backend == BackendKind::Cuda && tc.zero == 1);
  p.overlap = tc.overlap && dp_sends;
  p.virtual_stages = tc.virtual_stages;
  p.schedule = tc.schedule;
  const double undercount = plan_undercount_from_env();
  for (int s = 0; s < layout.pp; ++s) {
    p.stages.push_back(plan_stage(setup, device.precision, attention, s, data, dp_sends));
    MemoryAccount& m = p.stages.back().mem;
    m.activations = static_cast<std::size_t>(double(m.activations) * (1 - undercount));
  }
  return p;
}

LayoutPlan plan_config(RunConfig cfg, const Layout& layout) {
  cfg.parallel.tp = layout.tp;
  cfg.parallel.pp = layout.pp;
  cfg.validate_layout();
  return plan_layout(TrainSetup::make(cfg, layout), plan_device(cfg));
}

namespace {
// Optimizer offload's links, assumed alike on every tier: a PCIe 4.0 x16 link's ~25 GB/s each way,
// and ~50 GB/s of host memory bandwidth for the host's AdamW.
constexpr double kPcieGBps = 25, kHostGBps = 50;
double compute_bytes(const LayoutPlan& p) { return p.precision == DType::F32 ? 4.0 : 2.0; }
}  // namespace

double optimizer_shard_params(const StagePlan& s) { return double(s.shard_params); }

double dp_exposed_s(const LayoutPlan& p, double dp_s, double compute_s) {
  if (!p.overlap) return dp_s;
  if (p.zero == 3) return std::max(0.0, dp_s - compute_s);
  // Half of it is the reduction, behind the backward; half the all-gather, behind the next forward.
  return std::max(0.0, dp_s / 2 - 2 * compute_s / 3) + std::max(0.0, dp_s / 2 - compute_s / 3);
}

double offload_s(const LayoutPlan& p) {
  if (!p.offload) return 0;
  double t = 0;
  for (const StagePlan& s : p.stages) {
    const double shard = optimizer_shard_params(s);
    t = std::max(t, shard * (4.0 + compute_bytes(p)) / (kPcieGBps * 1e9) + double(s.mem.host) * 2 / (kHostGBps * 1e9));
  }
  return t;
}

double released_bytes_per_step(const LayoutPlan& p, const StagePlan& s) {
  if (p.zero < 2) return 0;
  return optimizer_shard_params(s) * (p.layout.dp - 1) * 4;
}

TimeEstimate estimate_time(const LayoutPlan& p, const Hardware& hw, double efficiency) {
  const Layout& l = p.layout;
  // GEMMs of few rows run far from peak: a saturating curve rows / (rows + gemm_half_rows) of
  // rows = micro-batch x tokens. On a CPU, a rank has one core while the ranks fit the cores.
  const double rows = double(p.micro_batch) * p.tokens;
  const double share = hw.cores > 0 ? std::min(1.0, double(hw.cores) / l.world()) : 1.0;
  const double peak = (p.precision == DType::F32 ? hw.fp32_tflops : hw.bf16_tflops) * 1e12 * efficiency *
                      rows / (rows + hw.gemm_half_rows) * share;
  auto link = [&](bool within_node) { return (within_node ? hw.intra_gbps : hw.inter_gbps) * 1e9; };
  const double tp_bw = link(l.tp <= hw.gpus_per_node);
  const double pp_bw = link(l.world() <= hw.gpus_per_node);
  const double dp_bw = link(l.tp * l.dp <= hw.gpus_per_node);
  const double lat = hw.latency_us * 1e-6, m = p.microbatches;
  TimeEstimate t;
  double per_mb = 0, dp_s = 0;
  for (const StagePlan& s : p.stages) {
    const double compute = s.flops / peak;
    const double comm = s.tp_bytes / tp_bw + s.tp_calls * lat + s.pp_bytes / pp_bw + s.pp_calls * lat;
    per_mb = std::max(per_mb, (compute + comm) / m);
    t.compute_s = std::max(t.compute_s, compute);
    dp_s = std::max(dp_s, s.dp_bytes / dp_bw + s.dp_calls * lat);
  }
  // Interleaving over v chunks shrinks the fill and drain to (pp - 1) / v microbatch times once
  // there are pp microbatches to keep the stages busy. With fewer, each microbatch's chunks still
  // pass every stage in turn: (pp - m) + (m - 1) / v, pp - 1 at m = 1 (interleaving gains nothing).
  const int pp = l.pp, v = p.virtual_stages;
  const double fill = m >= pp ? double(pp - 1) / v : (pp - m) + (m - 1) / double(v);
  t.step_s = per_mb * (m + fill) + dp_exposed_s(p, dp_s, t.compute_s) + offload_s(p);
  t.bubble_s = per_mb * fill;
  t.comm_s = t.step_s - t.compute_s - t.bubble_s;
  return t;
}

void search_sharding(FitRequest& req, bool cuda_run) {
  // Levels 2 and 3 hand memory back, which only the CPU backend can so far: for a GPU (a CUDA run,
  // or a GPU of the hardware table) the search keeps to level 1, so its top row runs there; a
  // level the flags pin is planned as asked.
  const bool gpu = cuda_run || req.hw.cores == 0;
  req.zeros = gpu ? std::vector<int>{1} : std::vector<int>{1, 2, 3};
  if (req.fixed.zero) req.zeros = {*req.fixed.zero};
  // On a CPU the host's memory is the device's: offloading frees nothing.
  req.offloads = req.hw.cores > 0 ? std::vector<bool>{false} : std::vector<bool>{false, true};
}

double LayoutPlan::peak_host_need() const {
  double need = 0;
  for (const StagePlan& s : stages)
    need = std::max(need, double(s.mem.host) + checkpoint_host_bytes(optimizer_shard_params(s) * layout.dp, layout.dp,
                                                                      largest_tensor, offload));
  return need;
}

double checkpoint_host_bytes(double stage_params, int dp, double largest_params, bool state_on_host) {
  const double buffer = double(h5::kTensorWriteBuffer);
  if (state_on_host)  // borrowed: the values past the shard (four kinds) and one tensor put together
    return (dp > 1 ? 20.0 * std::min(stage_params, largest_params) : 0.0) + buffer;
  return 16.0 * std::min(stage_params, stage_params / dp + largest_params) + buffer;
}

double largest_tensor_params(const DiTConfig& m, int tp) {
  double largest = 0;
  for (const ParamSpec& s : DiTStage::declare(m, StageLayout::whole(m)))
    largest = std::max(largest, double(s.local(tp).numel()));
  return largest;
}

std::size_t LayoutPlan::peak_host_bytes() const {
  std::size_t peak = 0;
  for (const StagePlan& s : stages) peak = std::max(peak, s.mem.host);
  return peak;
}

double FitRequest::budget_bytes() const { return hw.memory_gib * double(1u << 30) * (1 - margin); }

namespace {

template <class T>
bool allowed(const std::optional<T>& fixed, const T& v) {
  return !fixed || *fixed == v;
}

}  // namespace

// Whether a pipeline of pp stages can run the schedule and virtual stages the flags fix: GPipe and
// the zero-bubble schedules need a pipeline, ZB-V 2 x pp chunks that divide the depth, interleaving
// pp x v chunks of at least a block each (the grids a fixed schedule cannot use are not offered).
static bool serves_fixed_schedule(const FitConstraints& f, int pp, int depth) {
  if (f.schedule && *f.schedule != ScheduleKind::OneFOneB && pp < 2) return false;
  if (f.schedule && *f.schedule == ScheduleKind::ZbV && depth % (2 * pp) != 0) return false;
  return !f.virtual_stages || *f.virtual_stages == 1 || (pp >= 2 && pp * *f.virtual_stages <= depth);
}

std::vector<Layout> fit_grids(const FitRequest& req) {
  const DiTConfig& m = req.cfg.model.dit;
  std::vector<Layout> out;
  for (int tp = 1; tp <= std::min(req.gpus, req.hw.gpus_per_node); ++tp) {
    if (req.gpus % tp || m.num_heads % tp || m.mlp_hidden() % tp || m.ffn_hidden() % tp) continue;
    for (int pp = 1; pp <= std::min(req.gpus / tp, m.depth); ++pp) {
      if ((req.gpus / tp) % pp || !allowed(req.fixed.tp, tp) || !allowed(req.fixed.pp, pp) ||
          !serves_fixed_schedule(req.fixed, pp, m.depth))
        continue;
      const Layout l{tp, pp, req.gpus / (tp * pp)};
      if (req.cfg.train.global_batch % l.dp == 0) out.push_back(l);
    }
  }
  return out;
}

namespace {

// Every setting of one grid the search tries: micro-batch, precision, recompute mode, sequence
// parallelism, then the schedule (1F1B, its interleaved forms, GPipe, ZB-H1, ZB-V), as configs to plan.
// The settings to plan at layout l, in groups that differ only in what dp shards and where the
// optimizer state lives, cheapest first (zero 1, 2, 3, then the same offloaded): the time model
// never ranks a later one of a group above an earlier one, so a group's search stops at its first fit.
std::vector<std::vector<RunConfig>> fit_settings(const FitRequest& req, const Layout& l) {
  const DiTConfig& m = req.cfg.model.dit;
  std::vector<std::pair<ScheduleKind, int>> schedules = {{ScheduleKind::OneFOneB, 1}};
  for (int v = 2; l.pp > 1 && l.pp * v <= m.depth; ++v) schedules.push_back({ScheduleKind::OneFOneB, v});
  if (l.pp > 1) schedules.push_back({ScheduleKind::GPipe, 1});
  if (l.pp > 1) schedules.push_back({ScheduleKind::ZbH1, 1});
  if (l.pp > 1 && m.depth % (2 * l.pp) == 0) schedules.push_back({ScheduleKind::ZbV, 2});
  std::vector<std::vector<RunConfig>> out;
  std::vector<int> zeros = req.zeros.empty() ? std::vector<int>{req.cfg.optim.zero} : req.zeros;
  std::vector<bool> offloads = req.offloads.empty() ? std::vector<bool>{req.cfg.optim.offload == "cpu"} : req.offloads;
  if (l.dp == 1) zeros = {zeros.front()};  // nothing to shard: the levels plan alike
  const std::int64_t replica = req.cfg.train.global_batch / l.dp;
  for (std::int64_t micro = 1; micro <= replica; micro *= 2) {
    if (replica % micro || !allowed(req.fixed.micro_batch, int(micro))) continue;
    for (const DType precision : req.precisions)
      for (const Recompute recompute : req.recomputes)
        for (int sp = 0; sp <= (l.tp > 1 && m.num_patches() % l.tp == 0 ? 1 : 0); ++sp)
          for (const auto& [schedule, v] : schedules) {
            if (!allowed(req.fixed.recompute, recompute) || !allowed(req.fixed.sequence_parallel, sp == 1) ||
                !allowed(req.fixed.schedule, schedule) || !allowed(req.fixed.virtual_stages, v))
              continue;
            std::vector<RunConfig>& group = out.emplace_back();
            for (const bool offload : offloads)
              for (const int zero : zeros) {
                if (!allowed(req.fixed.zero, zero) || !allowed(req.fixed.offload, offload)) continue;
                RunConfig c = req.cfg;
                c.train.micro_batch = static_cast<int>(micro);
                c.train.precision = precision;
                c.train.recompute = recompute;
                c.train.recompute_blocks = 0;
                c.parallel.sequence_parallel = sp == 1;
                c.parallel.schedule = schedule;
                c.parallel.virtual_stages = v;
                c.parallel.pp_layers.clear();
                c.optim.zero = zero;
                c.optim.offload = offload ? "cpu" : "none";
                group.push_back(std::move(c));
              }
          }
  }
  return out;
}

}  // namespace

FitSearch fit_search(const FitRequest& req) {
  check_teacher(req.cfg);  // no layout serves a teacher of another meaning: say so, do not search past it
  FitSearch out;
  const double budget = req.budget_bytes();
  // A variant's plan: false when the trainer refuses it (e.g. more microbatch chunks than it
  // schedules) or it does not fit (the smallest of those is kept).
  const auto fits = [&](const RunConfig& c, const Layout& l, FitRow& r) {
    try {
      r.plan = plan_config(c, l);
    } catch (const Error&) {
      return false;
    }
    ++out.candidates;
    r.time = estimate_time(r.plan, req.hw, req.efficiency);
    const double node_host = r.plan.peak_host_need() * std::min(req.gpus, req.hw.gpus_per_node);
    if (req.host_memory_gib > 0 && node_host > req.host_memory_gib * double(1u << 30)) return false;
    if (double(r.plan.peak_bytes()) > budget) {
      if (!out.smallest || r.plan.peak_bytes() < out.smallest->plan.peak_bytes()) out.smallest = r;
      return false;
    }
    return true;
  };
  for (const Layout& l : fit_grids(req))
    for (const std::vector<RunConfig>& group : fit_settings(req, l)) {
      if (group.empty()) continue;
      // The group's last variant holds the least (zero 3, offloaded): when it does not fit, none does.
      FitRow last;
      if (!fits(group.back(), l, last)) continue;
      for (std::size_t i = 0; i < group.size(); ++i) {
        FitRow r;
        if (i + 1 == group.size()) r = std::move(last);
        else if (!fits(group[i], l, r)) continue;
        out.rows.push_back(std::move(r));  // the group's cheapest that fits
        break;
      }
    }
  std::stable_sort(out.rows.begin(), out.rows.end(),
                   [](const FitRow& a, const FitRow& b) { return a.time.step_s < b.time.step_s; });
  return out;
}

std::vector<FitRow> fit_layouts(const FitRequest& req) { return fit_search(req).rows; }

std::string format_plan(const LayoutPlan& p, const Hardware* hw) {
  std::ostringstream os;
  char line[512];
  os << "plan: " << p.layout.str() << ", micro-batch " << p.micro_batch << " x " << p.microbatches
     << " microbatches, " << dtype_name(p.precision) << ", recompute " << recompute_name(p.recompute)
     << (p.sequence_parallel ? ", sequence parallel" : "") << (p.layout.dp > 1 ? ", ZeRO-" + std::to_string(p.zero) : "")
     << (p.offload ? ", optimizer offloaded to the host" : "")
     << "\nper rank of each stage, GiB:\n";
  std::snprintf(line, sizeof line, "%5s %6s %8s %8s %8s %8s %8s %8s %11s %9s %9s %8s\n", "stage", "blocks",
                "params", "grads", "master", "adam_m", "adam_v", "ema", "activations", "messages",
                "workspace", "total");
  os << line;
  for (const StagePlan& s : p.stages) {
    const MemoryAccount& m = s.mem;
    std::snprintf(line, sizeof line, "%5d %6d %8s %8s %8s %8s %8s %8s %11s %9s %9s %8s\n", s.stage, s.blocks,
                  gib(m.params).c_str(), gib(m.grads).c_str(), gib(m.master).c_str(), gib(m.exp_avg).c_str(),
                  gib(m.exp_avg_sq).c_str(), gib(m.ema).c_str(), gib(m.activations).c_str(),
                  gib(m.messages).c_str(), gib(m.workspace).c_str(), gib(m.total()).c_str());
    os << line;
  }
  for (const StagePlan& s : p.stages)
    if (s.mem.parts > 0)
      os << "stage " << s.stage << ": the distillation teacher holds " << format_bytes(double(s.mem.parts))
         << " (its weights and one microbatch's forward), counted in the total\n";
  for (const StagePlan& s : p.stages)
    if (s.mem.host > 0)
      os << "stage " << s.stage << ": the offloaded optimizer state holds " << format_bytes(double(s.mem.host))
         << " of host memory per rank (not in the total)\n";
  os << "peak " << format_bytes(double(p.peak_bytes())) << " per rank"
     << " (activations: the microbatches in flight on the stage; messages are part of them)\n";
  if (hw) {
    const double cap = hw->memory_gib * double(1u << 30);
    const TimeEstimate t = estimate_time(p, *hw, 0.5);
    os << hw->name << " (" << hw->memory_gib << " GiB): "
       << (double(p.peak_bytes()) <= 0.9 * cap ? "fits" : "does NOT fit") << " with a 10% margin; "
       << "time model (a ranking aid, 50% of peak): " << t.step_s * 1e3 << " ms/step\n";
  }
  return os.str();
}

std::string plan_json(const LayoutPlan& p, const Hardware* hw) {
  std::ostringstream os;
  os.precision(17);
  os << "{\"tp\": " << p.layout.tp << ", \"pp\": " << p.layout.pp << ", \"dp\": " << p.layout.dp
     << ", \"micro_batch\": " << p.micro_batch << ", \"microbatches\": " << p.microbatches
     << ", \"precision\": \"" << dtype_name(p.precision) << "\", \"recompute\": \"" << recompute_name(p.recompute)
     << "\", \"sequence_parallel\": " << (p.sequence_parallel ? "true" : "false")
     << ", \"schedule\": \"" << schedule_name(p.schedule) << "\", \"virtual_stages\": " << p.virtual_stages
     << ", \"zero\": " << p.zero << ", \"offload\": " << (p.offload ? "true" : "false")
     << ", \"peak_bytes\": " << p.peak_bytes();
  if (hw) os << ", \"hardware\": " << quote_string(hw->name) << ", \"model_step_s\": " << estimate_time(p, *hw, 0.5).step_s;
  os << ", \"stages\": [";
  for (std::size_t i = 0; i < p.stages.size(); ++i) {
    const StagePlan& s = p.stages[i];
    const MemoryAccount& m = s.mem;
    os << (i ? ", " : "") << "{\"stage\": " << s.stage << ", \"blocks\": " << s.blocks
       << ", \"param_bytes\": " << m.params << ", \"grad_bytes\": " << m.grads
       << ", \"master_bytes\": " << m.master << ", \"exp_avg_bytes\": " << m.exp_avg
       << ", \"exp_avg_sq_bytes\": " << m.exp_avg_sq << ", \"ema_bytes\": " << m.ema
       << ", \"activation_bytes\": " << m.activations << ", \"message_bytes\": " << m.messages
       << ", \"workspace_bytes\": " << m.workspace << ", \"teacher_bytes\": " << m.parts
       << ", \"host_bytes\": " << m.host << ", \"total_bytes\": " << m.total()
       << ", \"tp_bytes\": " << s.tp_bytes << ", \"pp_bytes\": " << s.pp_bytes
       << ", \"dp_bytes\": " << s.dp_bytes << ", \"flops\": " << s.flops << "}";
  }
  os << "]}\n";
  return os.str();
}

std::string fit_json(const std::vector<FitRow>& rows, int top) {
  std::ostringstream os;
  os.precision(17);
  os << "[";
  for (int i = 0; i < std::min<int>(top, static_cast<int>(rows.size())); ++i) {
    std::string one = plan_json(rows[i].plan);
    one.erase(one.find_last_of('}'));
    os << (i ? ",\n " : "") << one << ", \"model_step_s\": " << rows[i].time.step_s << "}";
  }
  os << "]\n";
  return os.str();
}

void save_json(const std::string& path, const std::string& text) {
  write_file_atomic(path, with_json_mark(text, "plan"), "plan");  // the mark: a later --json may replace it
}

std::string format_fit_rows(const std::vector<FitRow>& rows, int first, int count) {
  std::ostringstream os;
  char line[256];
  std::snprintf(line, sizeof line, "%4s %3s %3s %3s %6s %5s %10s %3s %6s %2s %4s %7s %10s %12s\n", "rank", "tp", "pp",
                "dp", "micro", "prec", "recompute", "sp", "sched", "v", "zero", "offload", "peak", "model_ms");
  os << line;
  for (int i = first; i < std::min<int>(first + count, static_cast<int>(rows.size())); ++i) {
    const LayoutPlan& p = rows[i].plan;
    std::snprintf(line, sizeof line, "%4d %3d %3d %3d %6d %5s %10s %3s %6s %2d %4d %7s %10s %12.1f\n", i + 1,
                  p.layout.tp, p.layout.pp, p.layout.dp, p.micro_batch, std::string(dtype_name(p.precision)).c_str(),
                  recompute_name(p.recompute).c_str(), p.sequence_parallel ? "yes" : "no",
                  schedule_name(p.schedule).c_str(), p.virtual_stages, p.zero, p.offload ? "cpu" : "no",
                  format_bytes(double(p.peak_bytes())).c_str(), rows[i].time.step_s * 1e3);
    os << line;
  }
  return os.str();
}

std::string format_fit(const FitRequest& req, const std::vector<FitRow>& rows, int top) {
  std::ostringstream os;
  os << rows.size() << " layouts of " << req.gpus << " x " << req.hw.name << " (" << req.hw.memory_gib
     << " GiB, keeping " << int(100 * req.margin) << "% free) fit "
     << (req.cfg.model.preset.empty() ? std::string("the model") : req.cfg.model.preset) << " at global batch "
     << req.cfg.train.global_batch << ".\nRanked by the time model (a ranking aid, not a measurement: "
     << int(100 * req.efficiency) << "% of peak FLOP/s (less for small GEMMs), recomputation's extra forward, "
     << "the pipeline bubble, "
     << "messages over NVLink/PCIe within a node and InfiniBand across):\n";
  os << format_fit_rows(rows, 0, top);
  if (req.host_memory_gib > 0)
    os << "(layouts whose host memory (the offloaded optimizer state, and what a rank holds while it saves a "
       << "checkpoint) exceeds " << req.host_memory_gib << " GiB per node of "
       << std::min(req.gpus, req.hw.gpus_per_node) << " GPUs are left out)\n";
  const bool beyond_cuda = std::any_of(rows.begin(), rows.end(), [](const FitRow& r) { return r.plan.zero > 1; });
  if (beyond_cuda && req.hw.cores == 0)
    os << "(optim.zero = 2 and 3 on a GPU: what the state would take; the CUDA backend runs level 1 only so far)\n";
  if (rows.empty() && fit_grids(req).empty())
    os << "no layout divides " << req.gpus << " GPUs: tp must divide model.num_heads = " << req.cfg.model.dit.num_heads
       << " within a node of " << req.hw.gpus_per_node << ", pp at most model.depth = " << req.cfg.model.dit.depth
       << ", dp must divide train.global_batch = " << req.cfg.train.global_batch << " (memory is not the reason)\n";
  else if (rows.empty())
    os << "nothing fits: more GPUs, a smaller model or a smaller global batch\n";
  return os.str();
}

}  // namespace dit
