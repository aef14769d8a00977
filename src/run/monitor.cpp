// What a run watches while it trains (see monitor.h).
#include "run/monitor.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "core/resources.h"
#include "parallel/schedule_sim.h"

namespace dit {

namespace {

// A rank's row as it travels to rank 0: host doubles in this order.
enum Field : int {
  kStep, kCompute, kTp, kDp, kIdle, kData, kOptimizer, kCheckpoint,  // seconds per step
  kOpF, kOpB, kOpW,                                                  // mean op times
  kRss, kPeakRss, kDevice, kDevicePeak, kPlanned,                    // bytes (device: -1 unknown)
  kStage, kLane,                                                     // pp stage; which pipeline
  kFields
};

constexpr int kHostChars = 64;
constexpr int kStragglerLogs = 3;  // logs in a row before a slow rank is named

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

}  // namespace

std::vector<StageWait> split_pipeline_wait(const TrainConfig& train, int pp, int microbatches,
                                           const std::vector<double>& f, const std::vector<double>& b,
                                           const std::vector<double>& w, const std::vector<double>& idle) {
  std::vector<StageWait> out(static_cast<std::size_t>(pp));
  if (pp == 1) {
    out[0].exposed = idle[0];
    return out;
  }
  std::vector<std::vector<Action>> lists;
  int v = 1;
  for (int s = 0; s < pp; ++s) {
    lists.push_back(make_pipeline_schedule(train.schedule, pp, s, microbatches, train.virtual_stages));
    for (const Action& a : lists.back()) v = std::max(v, a.chunk + 1);
  }
  const auto cost = [&](int s, const Action& a) {
    const auto i = static_cast<std::size_t>(s);
    return a.op == Op::Forward ? f[i] : a.op == Op::BackwardWeight ? w[i] : b[i];
  };
  const PipelineSim sim =
      simulate_pipeline(lists, v, cost, [](int, const Action&) { return 0.0; }, train.stage.placement);
  for (int s = 0; s < pp; ++s) {
    const auto i = static_cast<std::size_t>(s);
    const double structural = sim.completed ? std::max(0.0, sim.makespan - sim.busy[i]) : 0.0;
    out[i].bubble = std::min(idle[i], structural);
    out[i].exposed = idle[i] - out[i].bubble;
  }
  return out;
}

RunMonitor::RunMonitor(ParallelContext& ctx, const TrainSetup& setup, double planned_bytes,
                       const std::string& ranks_path, double straggler_margin)
    : ctx_(&ctx),
      setup_(setup),
      planned_bytes_(planned_bytes),
      rows_(std::make_unique<MetricsWriter>(ranks_path)),
      straggler_margin_(straggler_margin) {
  const int n = ctx.world->size();
  char mine[kHostChars] = {};
  gethostname(mine, kHostChars - 1);
  std::vector<char> all(static_cast<std::size_t>(n) * kHostChars);
  constexpr std::int64_t kWords = kHostChars / sizeof(std::int32_t);
  ctx.world->all_gather(Tensor{mine, DType::I32, {kWords}, Device::Host},
                        Tensor{all.data(), DType::I32, {n * kWords}, Device::Host});
  if (ctx.world_rank != 0) return;
  for (int r = 0; r < n; ++r) hosts_.emplace_back(all.data() + static_cast<std::size_t>(r) * kHostChars);
  slow_logs_.assign(static_cast<std::size_t>(n), 0);
}

void RunMonitor::add_step(const StepStats& st) {
  const StepAccounting& a = st.acct;
  step_s_ += a.step_s;
  split_.compute += a.split.compute;
  split_.tp += a.split.tp;
  split_.dp += a.split.dp;
  split_.idle += a.split.idle;
  split_.data += a.split.data;
  split_.optimizer += a.split.optimizer;
  op_f_ += a.op_f_s, op_b_ += a.op_b_s, op_w_ += a.op_w_s;
  ++steps_;
}

std::vector<std::string> RunMonitor::log(std::int64_t step, const Backend& be, TensorBoardWriter* tb) {
  const int n = ctx_->world->size();
  const double k = double(std::max<std::int64_t>(1, steps_));
  std::vector<double> rows(static_cast<std::size_t>(n) * kFields, 0.0);
  double* me = rows.data() + static_cast<std::size_t>(ctx_->world_rank) * kFields;
  me[kStep] = step_s_ / k, me[kCompute] = split_.compute / k, me[kTp] = split_.tp / k, me[kDp] = split_.dp / k;
  me[kIdle] = split_.idle / k, me[kData] = split_.data / k, me[kOptimizer] = split_.optimizer / k;
  me[kCheckpoint] = checkpoint_s_ / k;
  me[kOpF] = op_f_ / k, me[kOpB] = op_b_ / k, me[kOpW] = op_w_ / k;
  me[kRss] = double(rss_bytes()), me[kPeakRss] = double(peak_rss_bytes());
  std::size_t free = 0, total = 0;
  if (be.device_memory(&free, &total)) {
    device_peak_ = std::max(device_peak_, double(total - free));
    me[kDevice] = double(total - free), me[kDevicePeak] = device_peak_;
  } else {
    me[kDevice] = me[kDevicePeak] = -1;
  }
  me[kPlanned] = planned_bytes_;
  me[kStage] = ctx_->coord.pp;
  me[kLane] = ctx_->coord.tp + ctx_->layout.tp * ctx_->coord.dp;
  ctx_->world->all_reduce_sum(rows.data(), static_cast<int>(rows.size()));
  split_ = {};
  step_s_ = checkpoint_s_ = op_f_ = op_b_ = op_w_ = 0;
  steps_ = 0;
  if (ctx_->world_rank != 0) return {};

  const auto at = [&](int r, int field) { return rows[static_cast<std::size_t>(r) * kFields + field]; };
  // Each pipeline's wait split by the simulator on its stages' op times.
  const int pp = ctx_->layout.pp;
  last_.assign(static_cast<std::size_t>(n), RankTimes{});
  for (int lane = 0; lane < n / pp; ++lane) {
    std::vector<int> of(static_cast<std::size_t>(pp), -1);  // stage -> world rank
    for (int r = 0; r < n; ++r)
      if (int(at(r, kLane)) == lane) of[static_cast<std::size_t>(at(r, kStage))] = r;
    std::vector<double> f, b, w, idle;
    for (int r : of) f.push_back(at(r, kOpF)), b.push_back(at(r, kOpB)), w.push_back(at(r, kOpW)), idle.push_back(at(r, kIdle));
    const std::vector<StageWait> waits = split_pipeline_wait(setup_.train, pp, setup_.batch.microbatches, f, b, w, idle);
    for (int s = 0; s < pp; ++s) {
      const int r = of[static_cast<std::size_t>(s)];
      RankTimes& t = last_[static_cast<std::size_t>(r)];
      t.step = at(r, kStep), t.compute = at(r, kCompute), t.tp = at(r, kTp), t.dp = at(r, kDp);
      t.data = at(r, kData), t.optimizer = at(r, kOptimizer), t.checkpoint = at(r, kCheckpoint);
      t.bubble = waits[static_cast<std::size_t>(s)].bubble;
      // At pp 1 the wait at the step's end is for the dp group's slowest rank.
      (pp > 1 ? t.pp : t.dp) += waits[static_cast<std::size_t>(s)].exposed;
    }
  }

  // ranks.jsonl: one object per logged step, a member per rank.
  std::string json = "{\"step\": " + std::to_string(step) + ", \"ranks\": [";
  for (int r = 0; r < n; ++r) {
    const RankTimes& t = last_[static_cast<std::size_t>(r)];
    json += std::string(r ? ", " : "") + "{\"rank\": " + std::to_string(r) + ", \"host\": \"" + hosts_[std::size_t(r)] +
            "\", \"stage\": " + std::to_string(int(at(r, kStage)));
    const std::pair<const char*, double> parts[] = {
        {"step_s", t.step}, {"compute_s", t.compute}, {"tp_s", t.tp}, {"pp_s", t.pp}, {"bubble_s", t.bubble},
        {"dp_s", t.dp}, {"data_s", t.data}, {"optimizer_s", t.optimizer}, {"checkpoint_s", t.checkpoint},
        {"rss_bytes", at(r, kRss)}, {"peak_rss_bytes", at(r, kPeakRss)}, {"planned_bytes", at(r, kPlanned)}};
    for (const auto& [name, v] : parts) json += ", \"" + std::string(name) + "\": " + json_number(v);
    if (at(r, kDevice) >= 0)
      json += ", \"device_bytes\": " + json_number(at(r, kDevice)) + ", \"device_peak_bytes\": " + json_number(at(r, kDevicePeak));
    json += "}";
  }
  rows_->write_line(json + "]}");

  if (tb) {
    // The split as a mean over the ranks, and per stage where the stages differ (pp > 1).
    const auto times = [](const RankTimes& t) {
      return std::vector<std::pair<const char*, double>>{
          {"step_s", t.step}, {"compute_s", t.compute}, {"tp_s", t.tp},   {"pp_s", t.pp},
          {"bubble_s", t.bubble}, {"dp_s", t.dp}, {"data_s", t.data}, {"optimizer_s", t.optimizer},
          {"checkpoint_s", t.checkpoint}};
    };
    const auto mean_of = [&](auto keep) {
      std::vector<double> sum(9, 0.0);
      int count = 0;
      for (int r = 0; r < n; ++r)
        if (keep(r)) {
          const auto v = times(last_[std::size_t(r)]);
          for (std::size_t i = 0; i < v.size(); ++i) sum[i] += v[i].second;
          ++count;
        }
      for (double& x : sum) x /= std::max(1, count);
      return sum;
    };
    const auto names = times(RankTimes{});
    const std::vector<double> all = mean_of([](int) { return true; });
    for (std::size_t i = 0; i < names.size(); ++i) tb->scalar(std::string("time/") + names[i].first, step, all[i]);
    if (pp > 1)
      for (int s = 0; s < pp; ++s) {
        const std::vector<double> st = mean_of([&](int r) { return int(at(r, kStage)) == s; });
        for (std::size_t i = 0; i < names.size(); ++i)
          tb->scalar("time/stage" + std::to_string(s) + "/" + names[i].first, step, st[i]);
      }
    // Memory per rank (the largest over the ranks past 64 of them) beside the planned bytes.
    const auto memory = [&](const std::string& prefix, int r) {
      tb->scalar(prefix + "rss_bytes", step, at(r, kRss));
      tb->scalar(prefix + "peak_rss_bytes", step, at(r, kPeakRss));
      tb->scalar(prefix + "planned_bytes", step, at(r, kPlanned));
      if (at(r, kDevice) >= 0) {
        tb->scalar(prefix + "device_bytes", step, at(r, kDevice));
        tb->scalar(prefix + "device_peak_bytes", step, at(r, kDevicePeak));
      }
    };
    if (n <= 64) {
      for (int r = 0; r < n; ++r) memory("memory/rank" + std::to_string(r) + "/", r);
    } else {
      int most = 0;
      for (int r = 1; r < n; ++r)
        if (at(r, kPeakRss) > at(most, kPeakRss)) most = r;
      memory("memory/largest_rank/", most);
    }
  }

  // A straggler: its own work (compute and update, not its waits on others) above the median's.
  std::vector<std::string> lines;
  if (straggler_margin_ <= 0 || n < 2) return lines;
  std::vector<double> own(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) own[std::size_t(r)] = last_[std::size_t(r)].compute + last_[std::size_t(r)].optimizer;
  std::vector<double> sorted = own;
  std::nth_element(sorted.begin(), sorted.begin() + n / 2, sorted.end());
  const double median = sorted[static_cast<std::size_t>(n / 2)];
  int slowest = 0;
  for (int r = 0; r < n; ++r) {
    const bool slow = median > 0 && own[std::size_t(r)] > (1 + straggler_margin_) * median;
    slow_logs_[std::size_t(r)] = slow ? slow_logs_[std::size_t(r)] + 1 : 0;
    if (own[std::size_t(r)] > own[std::size_t(slowest)]) slowest = r;
  }
  if (named_ >= 0 && slow_logs_[std::size_t(named_)] == 0) named_ = -1;  // it caught up
  if (named_ < 0 && slow_logs_[std::size_t(slowest)] >= kStragglerLogs) {
    named_ = slowest;
    const double s = own[std::size_t(slowest)];
    lines.push_back("straggler: rank " + std::to_string(slowest) + " on " + hosts_[std::size_t(slowest)] + " spent " +
                    fmt("%.3g", s) + " s a step on its own work over the last " + std::to_string(kStragglerLogs) +
                    " logs, " + fmt("%.0f", 100 * (s / median - 1)) + "% above the median rank's " +
                    fmt("%.3g", median) + " s (train.straggler_margin = " + fmt("%g", straggler_margin_) +
                    "); the others wait for it");
  }
  return lines;
}

}  // namespace dit
