// The layout of a `train --layout auto` job, the same on every rank (see layout_choice.h).
#include "plan/layout_choice.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <vector>

#include "core/error.h"
#include "engine/rank_backend.h"
#include "parallel/world.h"
#include "plan/auto_layout.h"

namespace dit {

namespace {

// Who runs the search: rank 0, which broadcasts its choice, or every rank (DIT_LAYOUT_SEARCH=each,
// a check that the search is deterministic).
enum class SearchOn { Rank0, Each };

SearchOn search_on_from_env() {
  const char* v = std::getenv("DIT_LAYOUT_SEARCH");
  const std::string s = v ? v : "";
  DIT_CHECK(s.empty() || s == "rank0" || s == "each", "DIT_LAYOUT_SEARCH=", s,
            ": expected rank0 (rank 0 searches and broadcasts) or each (every rank searches)");
  return s == "each" ? SearchOn::Each : SearchOn::Rank0;
}

// The chosen layout as numbers, for the broadcast and the agreement check.
std::vector<double> encode(const RunConfig& c) {
  return {double(c.parallel.tp), double(c.parallel.pp), double(c.train.micro_batch), double(int(c.train.recompute)),
          c.parallel.sequence_parallel ? 1.0 : 0.0, double(int(c.parallel.schedule)),
          double(c.parallel.virtual_stages), double(c.train.recompute_blocks)};
}

void decode(const std::vector<double>& v, RunConfig& c) {
  c.parallel.tp = int(v[0]);
  c.parallel.pp = int(v[1]);
  c.train.micro_batch = int(v[2]);
  c.train.recompute = static_cast<Recompute>(int(v[3]));
  c.parallel.sequence_parallel = v[4] != 0;
  c.parallel.schedule = static_cast<ScheduleKind>(int(v[5]));
  c.parallel.virtual_stages = int(v[6]);
  c.train.recompute_blocks = int(v[7]);
  c.validate_layout();
}

// A resumed run continues on the layout its folder's config.toml records, when that still divides
// the job, keeps to the flags and fits; else the search runs again (checkpoints reshard).
bool use_recorded(const AutoLayoutRequest& r, RunConfig& out, std::string& note) {
  const std::filesystem::path file = std::filesystem::path(r.cfg.run.dir) / "config.toml";
  if (r.cfg.run.resume.empty() || !std::filesystem::is_regular_file(file)) return false;
  RunConfig recorded;
  try {
    recorded = RunConfig::from_file(file.string());
  } catch (const Error& e) {
    note = "layout auto: " + file.string() + " does not read (" + e.what() + "): searching again";
    return false;
  }
  std::string why;
  if (!recorded_layout_fits(recorded, r, &why)) {
    note = "layout auto: the layout recorded in " + file.string() + " does not serve this job (" + why +
           "): searching again";
    return false;
  }
  out = r.cfg;
  out.parallel.tp = recorded.parallel.tp;
  out.parallel.pp = recorded.parallel.pp;
  out.parallel.sequence_parallel = recorded.parallel.sequence_parallel;
  out.parallel.schedule = recorded.parallel.schedule;
  out.parallel.virtual_stages = recorded.parallel.virtual_stages;
  out.parallel.pp_layers = recorded.parallel.pp_layers;
  out.train.micro_batch = recorded.train.micro_batch;
  out.train.recompute = recorded.train.recompute;
  out.train.recompute_blocks = recorded.train.recompute_blocks;
  out.optim.zero = recorded.optim.zero;
  out.optim.offload = recorded.optim.offload;
  out.validate_layout();
  note = "layout auto: continuing on the layout recorded in " + file.string() + ": tp " +
         std::to_string(out.parallel.tp) + ", pp " + std::to_string(out.parallel.pp) + ", micro-batch " +
         std::to_string(out.train.micro_batch) + ", recompute " + recompute_name(out.train.recompute);
  return true;
}

// The search (or the recorded layout) on this rank: `cfg` with the layout in, and what to print.
RunConfig choose_here(const AutoLayoutRequest& r, std::string& text) {
  RunConfig out;
  if (use_recorded(r, out, text)) return out;
  const std::string note = text;
  const AutoLayoutChoice c = choose_layout(r);
  out = r.cfg;
  apply_layout(out, c.search.rows[0].plan);
  text = (note.empty() ? "" : note + "\n") + format_choice(c);
  return out;
}

// CUDA without a memory given: the search plans for the free memory of the device this rank
// computes on, read before the run allocates (from a backend made and let go for the reading).
bool reads_device_memory(const RunConfig& cfg) {
  return cfg.train.backend == BackendKind::Cuda && cfg.parallel.memory_gib <= 0 && cfg.parallel.hardware.empty();
}

double device_free_bytes(const Backend* be) {
  std::size_t free = 0, total = 0;
  return be && be->device_memory(&free, &total) ? double(free) : 0.0;
}

}  // namespace

FitConstraints fit_constraints(const std::function<bool(const std::string&)>& gave, const RunConfig& cfg) {
  FitConstraints c;
  if (gave("parallel.tp")) c.tp = cfg.parallel.tp;
  if (gave("parallel.pp")) c.pp = cfg.parallel.pp;
  if (gave("train.micro_batch")) c.micro_batch = cfg.train.micro_batch;
  if (gave("parallel.virtual_stages")) c.virtual_stages = cfg.parallel.virtual_stages;
  if (gave("train.recompute")) c.recompute = cfg.train.recompute;
  if (gave("parallel.sequence_parallel")) c.sequence_parallel = cfg.parallel.sequence_parallel;
  if (gave("parallel.schedule")) c.schedule = cfg.parallel.schedule;
  if (gave("optim.zero")) c.zero = cfg.optim.zero;
  if (gave("optim.offload")) c.offload = cfg.optim.offload == "cpu";
  return c;
}

namespace {

// The job's request, every rank's: its world, and on CUDA the tightest device's free memory. `rank`
// receives the job's ranks as one data-parallel group, whose world agrees on the choice (no
// watchdog: rank 0 may search for long); on CUDA the backend whose free memory is read (collective:
// the rank's GPU placement).
AutoLayoutRequest job_request(const RunConfig& cfg, const FitConstraints& fixed, RankSetup& rank) {
  AutoLayoutRequest r;
  r.cfg = cfg;
  r.fixed = fixed;
  r.world = world_size();
  r.ranks_per_node = std::max(1, world_size() / node_count());
  rank = make_rank({.backend = reads_device_memory(cfg) ? cfg.backend_str() : "",
                    .precision = cfg.precision_str(),
                    .layout = {1, 1, world_size()},
                    .timeout_s = 0,
                    .comms = TensorComms::Leave});
  r.device_free_bytes = -rank.ctx.world->all_reduce_max(-device_free_bytes(rank.backend.get()));
  return r;
}

}  // namespace

std::vector<LayoutCandidate> layout_candidates(const RunConfig& cfg, const FitConstraints& fixed, int k) {
  RankSetup rank;
  const AutoLayoutRequest r = job_request(cfg, fixed, rank);
  Comm& world = *rank.ctx.world;
  const std::size_t width = encode(cfg).size() + 2;  // the layout, its predicted step and peak
  std::vector<double> rows(static_cast<std::size_t>(k) * width, 0.0);
  double found = 0;
  collective_check([&] {
    if (world_rank() != 0) return;
    const AutoLayoutChoice c = choose_layout(r);
    std::vector<std::vector<double>> seen;
    for (const FitRow& row : c.search.rows) {
      if (found >= k) break;
      RunConfig one = cfg;
      apply_layout(one, row.plan);
      std::vector<double> code = encode(one);
      if (std::find(seen.begin(), seen.end(), code) != seen.end()) continue;  // the same keys
      seen.push_back(code);
      code.push_back(row.time.step_s);
      code.push_back(double(row.plan.peak_bytes()));
      std::copy(code.begin(), code.end(), rows.begin() + static_cast<std::ptrdiff_t>(found * double(width)));
      ++found;
    }
  });
  world.all_reduce_sum(rows.data(), static_cast<int>(rows.size()));
  found = world.all_reduce_max(found);
  std::vector<LayoutCandidate> out;
  for (int i = 0; i < int(found); ++i) {
    const std::vector<double> code(rows.begin() + std::ptrdiff_t(i) * std::ptrdiff_t(width),
                                   rows.begin() + std::ptrdiff_t(i + 1) * std::ptrdiff_t(width));
    LayoutCandidate c;
    c.cfg = cfg;
    decode(code, c.cfg);
    c.predicted_s = code[width - 2];
    c.predicted_bytes = code[width - 1];
    out.push_back(std::move(c));
  }
  return out;
}

RunConfig resolve_auto_layout(const RunConfig& cfg, const FitConstraints& fixed) {
  SearchOn on = SearchOn::Rank0;
  collective_check([&] { on = search_on_from_env(); });
  RankSetup rank;
  const AutoLayoutRequest r = job_request(cfg, fixed, rank);  // every rank plans for the tightest device
  Comm& world = *rank.ctx.world;
  const bool searches = on == SearchOn::Each || world_rank() == 0;
  RunConfig out = cfg;
  std::string text;
  collective_check([&] {
    if (searches) out = choose_here(r, text);
  });
  std::vector<double> mine = searches ? encode(out) : std::vector<double>(encode(out).size(), 0.0);
  std::vector<double> sum = mine;
  world.all_reduce_sum(sum.data(), static_cast<int>(sum.size()));
  collective_check([&] {
    if (on == SearchOn::Rank0) return decode(sum, out);
    for (std::size_t i = 0; i < sum.size(); ++i)
      DIT_CHECK(sum[i] == mine[i] * r.world, "parallel.layout = \"auto\": the ranks' searches chose different ",
                "layouts (DIT_LAYOUT_SEARCH=each; rank ", world_rank(), " chose tp ", out.parallel.tp, " pp ",
                out.parallel.pp, " micro-batch ", out.train.micro_batch, "); unset DIT_LAYOUT_SEARCH to let rank 0 choose");
  });
  if (world_rank() == 0 && !text.empty()) {
    std::printf("%s%s", text.c_str(), text.back() == '\n' ? "" : "\n");
    std::fflush(stdout);
  }
  return out;
}

}  // namespace dit
