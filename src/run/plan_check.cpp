// The plan check and the memory headroom (see plan_check.h).
#include "run/plan_check.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

#include "core/resources.h"

namespace dit {

namespace {

constexpr double kPlanTolerance = 0.05;  // a category off by more than this share of its plan is reported

// The categories of accounting.json, in its order.
std::vector<std::pair<const char*, double>> categories(const MemoryAccount& m) {
  return {{"param_bytes", double(m.params)},        {"grad_bytes", double(m.grads)},
          {"master_bytes", double(m.master)},       {"exp_avg_bytes", double(m.exp_avg)},
          {"exp_avg_sq_bytes", double(m.exp_avg_sq)}, {"ema_bytes", double(m.ema)},
          {"activation_bytes", double(m.activations)}, {"message_bytes", double(m.messages)},
          {"workspace_bytes", double(m.workspace)}, {"total_bytes", double(m.total())}};
}

bool off(double measured, double planned) { return std::fabs(measured - planned) > kPlanTolerance * planned; }

}  // namespace

std::string check_plan(ParallelContext& ctx, const std::vector<MemoryAccount>& planned, const MemoryAccount& measured) {
  const int n = ctx.world->size();
  const auto mine = categories(measured);
  const auto plan = categories(planned.at(std::size_t(ctx.coord.pp)));
  const std::size_t k = mine.size();
  std::vector<double> cols(std::size_t(n) * 2 * k, 0.0);  // per rank: measured, then planned
  for (std::size_t i = 0; i < k; ++i) {
    cols[2 * k * ctx.world_rank + i] = mine[i].second;
    cols[2 * k * ctx.world_rank + k + i] = plan[i].second;
  }
  ctx.world->all_reduce_sum(cols.data(), static_cast<int>(cols.size()));
  std::string first;
  int more = 0;
  for (int r = 0; r < n; ++r)
    for (std::size_t i = 0; i < k; ++i) {
      const double m = cols[2 * k * r + i], p = cols[2 * k * r + k + i];
      if (!off(m, p)) continue;
      if (!first.empty()) {
        ++more;
        continue;
      }
      char pct[32];
      std::snprintf(pct, sizeof pct, p > 0 ? "%+.1f%%" : "planned none", 100 * (m - p) / (p > 0 ? p : 1));
      first = "plan check: rank " + std::to_string(r) + " (stage " + std::to_string(grid_coord(ctx.layout, r).pp) +
              ") " + mine[i].first + ": measured " + format_bytes(m) + " (" + std::to_string(std::llround(m)) +
              " bytes), planned " + format_bytes(p) + " (" + std::to_string(std::llround(p)) + " bytes), " + pct;
    }
  if (first.empty()) return "";
  return first + (more > 0 ? "; " + std::to_string(more) + " more (rank, category) pairs are off by more than 5%" : "") +
         " (the planner's numbers are the layout search's; accounting.json has the run's)";
}

std::string memory_headroom_note(ParallelContext& ctx, const Backend& be, double margin) {
  const int n = ctx.world->size();
  double free = 0, limit = 0;
  std::size_t dfree = 0, dtotal = 0;
  const bool device = be.device_memory(&dfree, &dtotal);
  const char* source = "device";
  if (device) {
    free = double(dfree), limit = double(dtotal);
  } else {
    const HostMemory h = host_memory();
    free = h.free, limit = h.limit, source = h.source;
  }
  std::vector<double> cols(std::size_t(n) * 2, 0.0);
  cols[2 * ctx.world_rank] = free;
  cols[2 * ctx.world_rank + 1] = limit;
  ctx.world->all_reduce_sum(cols.data(), static_cast<int>(cols.size()));
  int low = -1;
  for (int r = 0; r < n; ++r) {
    if (cols[2 * r + 1] <= 0) continue;  // not known on that rank
    if (low < 0 || cols[2 * r] / cols[2 * r + 1] < cols[2 * low] / cols[2 * low + 1]) low = r;
  }
  if (low < 0 || cols[2 * low] >= margin * cols[2 * low + 1]) return "";
  char pct[16];
  std::snprintf(pct, sizeof pct, "%g%%", 100 * margin);
  return std::string("low memory: rank ") + std::to_string(low) + " has " + format_bytes(cols[2 * low]) +
         " free of " + format_bytes(cols[2 * low + 1]) + " (" + (device ? "its GPU" : source) +
         "), under parallel.memory_margin = " + pct;
}

double unplanned_device_bytes(const Backend& be, const MemoryAccount& mem) {
  std::size_t free = 0, total = 0;
  if (!be.device_memory(&free, &total)) return -1;
  return std::max(0.0, double(total - free) - double(mem.total()));
}

}  // namespace dit
