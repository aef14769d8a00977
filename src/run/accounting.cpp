// The last step's accounting, per rank (see accounting.h).
#include "run/accounting.h"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "core/quote.h"
#include "core/resources.h"
#include "io/atomic_file.h"
#include "parallel/agree.h"

namespace dit {

void report_accounting(ParallelContext& ctx, const StepAccounting& a, const MemoryAccount& mem,
                       const std::string& json_path, const std::string& attention, double unplanned) {
  std::vector<std::pair<const char*, double>> mine = {
      {"step_s", a.step_s},
      {"compute_s", a.compute_s},
      {"pp_wait_s", a.pp_wait_s},
      {"optimizer_s", a.optimizer_s},
      {"tp_bytes", double(a.tp_bytes)},
      {"pp_bytes", double(a.pp_bytes)},
      {"dp_bytes", double(a.dp_bytes)},
      {"measured_bubble", a.measured_bubble},
      {"theoretical_bubble", a.theoretical_bubble},
      {"op_forward_s", a.op_f_s},
      {"op_backward_s", a.op_b_s},
      {"op_weight_s", a.op_w_s},
      {"host_syncs_per_step", double(a.host_syncs)},
      {"optimizer_state_bytes", double(mem.master + mem.exp_avg + mem.exp_avg_sq + mem.ema)},
      {"param_bytes", double(mem.params)},
      {"grad_bytes", double(mem.grads)},
      {"master_bytes", double(mem.master)},
      {"exp_avg_bytes", double(mem.exp_avg)},
      {"exp_avg_sq_bytes", double(mem.exp_avg_sq)},
      {"ema_bytes", double(mem.ema)},
      {"activation_bytes", double(mem.activations)},
      {"message_bytes", double(mem.messages)},
      {"workspace_bytes", double(mem.workspace)},
      {"teacher_bytes", double(mem.parts)},
      {"host_bytes", double(mem.host)},
      {"total_bytes", double(mem.total())},
  };
  // Every rank runs the same backend, so every row has the column or none does.
  if (unplanned >= 0) mine.push_back({"unplanned_bytes", unplanned});
  const int n = ctx.world->size();
  const std::size_t k = mine.size();
  std::vector<double> cols(static_cast<std::size_t>(n) * k, 0.0);
  for (std::size_t i = 0; i < k; ++i) cols[k * ctx.world_rank + i] = mine[i].second;
  ctx.world->all_reduce_sum(cols.data(), static_cast<int>(cols.size()));
  // Rank 0 prints and writes; a write that fails (a full disk) is every rank's error.
  agree(*ctx.world, [&] {
    if (ctx.world_rank != 0) return;
    auto col = [&](int r, const char* name) {
      for (std::size_t i = 0; i < k; ++i)
        if (std::string(mine[i].first) == name) return cols[k * r + i];
      return 0.0;
    };
    std::printf("\nper-rank accounting of the last step (%s):\n", ctx.layout.str().c_str());
    std::printf("%5s %4s %4s %4s %9s %11s %11s %11s %9s %9s %12s %12s %12s\n", "rank", "tp", "pp", "dp", "step_s",
                "tp_bytes", "pp_bytes", "dp_bytes", "bubble", "theory", "optim_state", "activations", "total");
    std::ostringstream js;
    js.precision(17);  // byte counts exactly
    js << "[\n";
    for (int r = 0; r < n; ++r) {
      const GridCoord g = grid_coord(ctx.layout, r);
      std::printf("%5d %4d %4d %4d %9.3f %11.0f %11.0f %11.0f %8.1f%% %8.1f%% %12s %12s %12s\n", r, g.tp, g.pp, g.dp,
                  col(r, "step_s"), col(r, "tp_bytes"), col(r, "pp_bytes"), col(r, "dp_bytes"),
                  100 * col(r, "measured_bubble"), 100 * col(r, "theoretical_bubble"),
                  format_bytes(col(r, "optimizer_state_bytes")).c_str(), format_bytes(col(r, "activation_bytes")).c_str(),
                  format_bytes(col(r, "total_bytes")).c_str());
      js << "  {\"rank\": " << r << ", \"tp\": " << g.tp << ", \"pp\": " << g.pp << ", \"dp\": " << g.dp;
      for (std::size_t i = 0; i < k; ++i) js << ", \"" << mine[i].first << "\": " << cols[k * r + i];
      if (r == 0 && !attention.empty()) js << ", \"attention\": " << quote_string(attention);
      js << "}" << (r + 1 < n ? ",\n" : "\n");
    }
    js << "]\n";
    write_file_atomic(json_path, js.str(), "accounting");
  });
}

}  // namespace dit
