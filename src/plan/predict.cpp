// The performance model (see predict.h).
#include "plan/predict.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <toml.hpp>

#include "core/quote.h"
#include "io/toml_guard.h"
#include "parallel/schedule_sim.h"

namespace dit {

PredictParams predict_params_for(const Hardware& hw, DType precision, double efficiency) {
  PredictParams p;
  p.name = hw.name;
  p.flops_per_s = (precision == DType::F32 ? hw.fp32_tflops : hw.bf16_tflops) * 1e12 * efficiency;
  p.gpus_per_node = hw.gpus_per_node;
  p.intra_gbps = hw.intra_gbps;
  p.inter_gbps = hw.inter_gbps;
  p.latency_us = hw.latency_us;
  // AdamW + EMA stream about 40 bytes per parameter (fp32 master, two moments, EMA, 16-bit param
  // and grad, read and written) at about 2.5 TB/s of HBM.
  p.optimizer_ns_per_param = 40.0 / 2.5e12 * 1e9;
  p.step_overhead_s = 2e-3;
  return p;
}

namespace {

// The keys of a calibration's [predict] table, with the range each may take. gpus_per_node is an
// integer; the others are numbers. The lower bounds keep every time the model computes finite: a
// rate or a core share of 1e-300 made the predicted step time inf.
struct CalibrationKey {
  const char* key;
  double lo, hi;
  bool zero_too;  // 0 is accepted besides [lo, hi] (cores: a device per rank)
  const char* what;
};
constexpr CalibrationKey kCalibrationKeys[] = {
    {"flops_per_s", 1e6, 1e18, false, "FLOP/s of one rank"},
    {"rows_half", 0, 1e9, false, "GEMM rows"},
    {"gpus_per_node", 1, 65536, false, "ranks per node (an integer)"},
    {"intra_gbps", 1e-3, 1e5, false, "GB/s"},
    {"inter_gbps", 1e-3, 1e5, false, "GB/s"},
    {"latency_us", 0, 1e6, false, "microseconds"},
    {"pp_latency_us", -1, 1e6, false, "microseconds (< 0: latency_us)"},
    {"optimizer_ns_per_param", 0, 1e6, false, "nanoseconds"},
    {"step_overhead_s", 0, 3600, false, "seconds"},
    {"release_ns_per_byte", 0, 1e6, false, "nanoseconds"},
    {"cores", 0.01, 1e6, true, "cores shared by a node's ranks (0: a device per rank)"},
};

double* calibration_field(PredictParams& p, const std::string& key, double& gpus_per_node) {
  if (key == "flops_per_s") return &p.flops_per_s;
  if (key == "rows_half") return &p.rows_half;
  if (key == "gpus_per_node") return &gpus_per_node;
  if (key == "intra_gbps") return &p.intra_gbps;
  if (key == "inter_gbps") return &p.inter_gbps;
  if (key == "latency_us") return &p.latency_us;
  if (key == "pp_latency_us") return &p.pp_latency_us;
  if (key == "optimizer_ns_per_param") return &p.optimizer_ns_per_param;
  if (key == "step_overhead_s") return &p.step_overhead_s;
  if (key == "release_ns_per_byte") return &p.release_ns_per_byte;
  if (key == "cores") return &p.cores;
  return nullptr;
}

std::string calibration_keys() {
  std::string out = "name, calibration_points";
  for (const CalibrationKey& k : kCalibrationKeys) out += std::string(", ") + k.key;
  return out;
}

void read_calibration_number(const std::string& path, const CalibrationKey& k, const toml::value& x, double& out) {
  const std::string key = std::string("predict.") + k.key;
  DIT_CHECK(x.is_integer() || (x.is_floating() && std::string(k.key) != "gpus_per_node"), path, ": ", key,
            ": expected ", k.what, ", got ", toml::format(x));
  const double v = x.is_integer() ? double(x.as_integer()) : x.as_floating();
  const bool in_range = std::isfinite(v) && ((v >= k.lo && v <= k.hi) || (k.zero_too && v == 0));
  DIT_CHECK(in_range, path, ": ", key, " = ", v, ": expected ", k.what, " in [", k.lo, ", ", k.hi, "]",
            k.zero_too ? " or 0" : "");
  out = v;
}

}  // namespace

// As strict as the run config: a regular TOML file, nesting bounded before toml11 parses it, one
// [predict] table of known keys, each a finite number in its range.
PredictParams load_predict_params(const std::string& path) {
  std::error_code ec;
  DIT_CHECK(std::filesystem::is_regular_file(path, ec), path, ": cannot read the calibration (",
            std::filesystem::exists(path, ec) ? "not a regular file" : "no such file",
            "; expected a TOML file with a [predict] table)");
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return predict_params_from_toml(text.str(), path);
}

PredictParams predict_params_from_toml(const std::string& text, const std::string& path) {
  check_toml_nesting(text, path);
  toml::value v;
  try {
    std::istringstream is(text);
    v = toml::parse(is, path);
  } catch (const std::exception& e) {
    DIT_FAIL(path, ": cannot read the calibration (", e.what(), ")");
  }
  for (const auto& [name, value] : v.as_table())
    DIT_CHECK(name == "predict" && value.is_table(), path, ": unexpected '", name,
              "': a calibration holds one [predict] table");
  DIT_CHECK(v.contains("predict"), path, ": no [predict] table");
  PredictParams p;
  double gpus_per_node = p.gpus_per_node;
  for (const auto& [key, x] : v.at("predict").as_table()) {
    if (key == "name") {
      DIT_CHECK(x.is_string(), path, ": predict.name: expected a string");
      p.name = x.as_string();
      continue;
    }
    if (key == "calibration_points") continue;  // what the calibration was fitted on (a record)
    const CalibrationKey* k = nullptr;
    for (const CalibrationKey& c : kCalibrationKeys)
      if (key == c.key) k = &c;
    DIT_CHECK(k, path, ": unknown key predict.", key, " (keys: ", calibration_keys(), ")");
    read_calibration_number(path, *k, x, *calibration_field(p, key, gpus_per_node));
  }
  p.gpus_per_node = static_cast<int>(gpus_per_node);
  return p;
}

namespace {
// Whether action a on stage s sends its result on (to the next chunk forward, the previous backward).
bool sends(const Action& a, int s, int pp, int v, ChunkPlacement pl) {
  if (a.op == Op::BackwardWeight) return false;
  const int k = model_chunk(pp, s, a.chunk, pl);
  const bool next_on_same_rank = chunk_at(pp, a.op == Op::Forward ? k + 1 : k - 1, pl).stage == s;
  return (a.op == Op::Forward ? k < pp * v - 1 : k > 0) && !next_on_same_rank;
}

// Seconds of action a given its stage's forward and fused-backward times: a split backward's
// halves take half each (T_B = T_W).
double op_seconds(const Action& a, double fwd, double bwd) {
  if (a.op == Op::Forward) return fwd;
  return a.op == Op::Backward ? bwd : bwd / 2;
}
}  // namespace

namespace {
// The pipeline part of the model at a given share of a core per busy rank.
Prediction simulate_at(const LayoutPlan& p, const PredictParams& hw, ScheduleKind schedule, double share) {
  const Layout& l = p.layout;
  const int m = p.microbatches, v = p.virtual_stages, pp = l.pp;
  const ChunkPlacement pl = placement_of(schedule);
  const double rows = double(p.micro_batch) * p.tokens;
  const double rate = hw.flops_per_s * share * rows / (rows + hw.rows_half);
  // The rank grid puts tp innermost, then dp, then pp (grid.h): which groups stay within a node.
  auto bw = [&](bool within) { return within ? hw.intra_gbps : hw.inter_gbps; };
  const bool tp_in = l.tp <= hw.gpus_per_node, dp_in = l.tp * l.dp <= hw.gpus_per_node,
             pp_in = l.world() <= hw.gpus_per_node;
  std::vector<std::vector<Action>> lists;
  for (int s = 0; s < pp; ++s) lists.push_back(make_pipeline_schedule(schedule, pp, s, m, v));
  std::vector<double> fwd(pp), bwd(pp), msg(pp);
  Prediction r;
  for (int s = 0; s < pp; ++s) {
    const StagePlan& st = p.stages[s];
    const double tp_s = st.tp_bytes / (bw(tp_in) * 1e9) + st.tp_calls * hw.latency_us * 1e-6;
    const double work = st.flops / rate + tp_s;  // one step of this rank, tp collectives inline
    fwd[s] = work / 3 / (m * v);
    bwd[s] = 2 * work / 3 / (m * v);
    r.compute_s = std::max(r.compute_s, work);
    int n = 0;
    for (const Action& a : lists[s]) n += sends(a, s, pp, v, pl);
    // Seconds of one send: its bytes (x and c) over the link, and a latency per tensor.
    const double pp_lat = hw.pp_latency_us >= 0 ? hw.pp_latency_us : hw.latency_us;
    msg[s] = n > 0 ? st.pp_bytes / double(n) / (bw(pp_in) * 1e9) + 2 * pp_lat * 1e-6 : 0;
    const double dp_s = st.dp_bytes / (bw(dp_in) * 1e9) + st.dp_calls * hw.latency_us * 1e-6;
    r.dp_s = std::max(r.dp_s, dp_s);
  }
  const PipelineSim sim = simulate_pipeline(
      lists, v, [&](int s, const Action& a) { return op_seconds(a, fwd[s], bwd[s]); },
      [&](int s, const Action& a) { return sends(a, s, pp, v, pl) ? msg[s] : 0.0; }, pl);
  DIT_CHECK(sim.completed, "predict: the schedule tables deadlock in simulation (pp ", pp, ", m ", m, ", v ", v, ")");
  r.pipeline_s = sim.makespan;
  r.bubble = sim.bubble();
  return r;
}
}  // namespace

Prediction predict_step(const LayoutPlan& p, const PredictParams& hw, std::int64_t global_batch,
                        ScheduleKind schedule) {
  const Layout& l = p.layout;
  // Ranks on one machine share its cores (one rank runs as calibrated). A rank waiting in the
  // pipeline yields its core (Open MPI does when oversubscribed), so the busy ranks share them: a
  // second pass gives each the share of world x (1 - bubble) busy ranks.
  const bool shared = hw.cores > 0 && l.world() > 1;
  const double all_busy = shared ? std::min(1.0, hw.cores / l.world()) : 1.0;
  Prediction r = simulate_at(p, hw, schedule, all_busy);
  if (shared && l.pp > 1) {
    const double busy = std::max(1.0, l.world() * (1 - r.bubble));
    r = simulate_at(p, hw, schedule, std::min(1.0, hw.cores / busy));
  }
  // On shared cores a rank's messages are copies its core makes: overlap hides none of them.
  if (!shared) r.dp_s = dp_exposed_s(p, r.dp_s, r.compute_s);
  for (const StagePlan& st : p.stages) {  // every rank updates its shard at once
    r.optimizer_s = std::max(r.optimizer_s, optimizer_shard_params(st) * hw.optimizer_ns_per_param * 1e-9 / all_busy);
    r.release_s = std::max(r.release_s, released_bytes_per_step(p, st) * hw.release_ns_per_byte * 1e-9 / all_busy);
  }
  // On a CPU the offloaded state is in the memory the compute uses: nothing crosses a link.
  r.offload_s = hw.cores > 0 ? 0.0 : offload_s(p);
  r.step_s = r.pipeline_s + r.dp_s + r.optimizer_s + r.release_s + r.offload_s + hw.step_overhead_s;
  r.images_per_s = double(global_batch) / r.step_s;
  return r;
}

std::string prediction_json(const Prediction& r, const PredictParams& hw) {
  std::ostringstream os;
  os.precision(9);
  os << "{\"hardware\": " << quote_string(hw.name) << ", \"step_s\": " << r.step_s << ", \"pipeline_s\": " << r.pipeline_s
     << ", \"compute_s\": " << r.compute_s << ", \"bubble\": " << r.bubble << ", \"dp_s\": " << r.dp_s
     << ", \"optimizer_s\": " << r.optimizer_s << ", \"release_s\": " << r.release_s
     << ", \"offload_s\": " << r.offload_s << ", \"images_per_s\": " << r.images_per_s << "}";
  return os.str();
}

}  // namespace dit
