// bench_train: training throughput of dit_mp's own Trainer (a benchmark, not a test). Real steps
// (forward, hybrid loss, backward, ZeRO-1 AdamW and EMA) on random latents; warm-up steps are
// left out; reports images/s, ms/step (median and spread, split by phase), TFLOP/s and MFU.
//   bench_train --model DiT-XL/2 --input-size 32 --channels 4 --backend cuda --precision bf16 \
//               --batch 256 --micro-batch 256 --steps 20 --warmup 5 --json xl2.json
// One rank by default; under mpirun the ranks are data-parallel replicas (tp 1, pp 1).
// A training image costs 3 x the forward FLOPs (forward + backward), i.e. 6 x the forward
// multiply-adds that the DiT paper tabulates (118.6 GMACs for XL/2: 712 GFLOP per image).
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "core/clock.h"
#include "engine/rank_backend.h"
#include "parallel/world.h"
#include "run/log.h"
#include "engine/trainer.h"
#include "backend/timed_backend.h"
#include "io/dataset.h"
#include "parallel/backend_comms.h"
#include "parallel/grid.h"

namespace {

using namespace dit;

struct BenchOptions {
  std::string model = "DiT-S/4";
  int input_size = 32;
  int channels = 4;
  int num_classes = 1000;
  std::string backend = "cpu";
  std::string precision = "fp32";
  std::int64_t batch = 8;  // global batch (over all ranks)
  int micro_batch = 0;     // 0: the whole per-rank batch in one microbatch
  int steps = 10;
  int warmup = 2;
  double peak_tflops = 0;  // 0: 989 (H100/H200 dense bf16) on cuda, 0.215 (this CPU) on cpu
  double lr = 1e-4;
  std::uint64_t seed = 0;
  std::string json;
  std::string name;  // a label for the JSON and the summary line
};

// The DiT paper's forward GMACs (its "Gflops", Table 4) at 256x256 images = 32x32 latents.
double paper_gmacs(const std::string& preset) {
  static const std::map<std::string, double> t = {
      {"DiT-S/8", 0.36}, {"DiT-S/4", 1.41}, {"DiT-S/2", 6.06},   {"DiT-B/8", 1.42},
      {"DiT-B/4", 5.56}, {"DiT-B/2", 23.01}, {"DiT-L/8", 4.91},  {"DiT-L/4", 19.70},
      {"DiT-L/2", 80.71}, {"DiT-XL/8", 7.39}, {"DiT-XL/4", 29.05}, {"DiT-XL/2", 118.64}};
  const auto it = t.find(preset);
  return it == t.end() ? 0.0 : it->second;
}

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double pos = q * double(v.size() - 1);
  const std::size_t lo = static_cast<std::size_t>(pos);
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - double(lo)) * (v[hi] - v[lo]);
}

BenchOptions parse(int argc, char** argv, int rank, bool& exit_now, int& exit_code) {
  BenchOptions o;
  CLI::App app{"Training throughput of dit_mp's Trainer on random latents (warm-up excluded)"};
  app.add_option("--model", o.model, "Model preset, e.g. DiT-XL/2")->capture_default_str();
  app.add_option("--input-size", o.input_size, "Latent side (32 = 256px images)")->capture_default_str();
  app.add_option("--channels", o.channels, "Latent channels")->capture_default_str();
  app.add_option("--num-classes", o.num_classes, "Class labels of the model")->capture_default_str();
  app.add_option("--backend", o.backend, "cpu or cuda")->capture_default_str();
  app.add_option("--precision", o.precision, "fp32, bf16 or fp16")->capture_default_str();
  app.add_option("--batch", o.batch, "Global batch per step")->capture_default_str();
  app.add_option("--micro-batch", o.micro_batch, "Images per microbatch (0: the whole batch)")
      ->capture_default_str();
  app.add_option("--steps", o.steps, "Timed steps")->capture_default_str();
  app.add_option("--warmup", o.warmup, "Untimed steps first")->capture_default_str();
  app.add_option("--peak-tflops", o.peak_tflops,
                 "Peak TFLOP/s for MFU, per GPU on cuda, per machine on cpu (default: 989 on cuda, 0.215 on cpu)");
  app.add_option("--lr", o.lr, "AdamW learning rate")->capture_default_str();
  app.add_option("--seed", o.seed, "Seed of init, data and noise")->capture_default_str();
  app.add_option("--json", o.json, "Write the results as JSON here (rank 0)");
  app.add_option("--name", o.name, "Label of this run in the output (default: the model)");
  exit_now = false;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    exit_now = true;
    exit_code = rank == 0 ? app.exit(e) : e.get_exit_code();
  }
  return o;
}

struct Measured {
  std::vector<double> wall_s, compute_s, pp_wait_s, optimizer_s, trainer_s;
  std::uint64_t host_syncs = 0;  // times one timed step made the host wait for the backend
  // Of 2 extra steps with every primitive bracketed by timeline marks (CUDA events): the share of
  // the step's wall time spent inside primitives; the rest are gaps (launches, host work, waits
  // on communication). The marks cost a little, so these steps are not among the timed ones.
  double kernel_share = -1;
  double last_loss = 0;
  bool finite = true;
  int skipped = 0;  // fp16 steps whose update was skipped for overflow (timed steps)
  StepAccounting last;
};

// Warm-up, then the timed steps; the backend is synchronized before each host clock read, and the
// step time is the slowest rank's.
Measured measure(Trainer& trainer, TimedBackend& be, ParallelContext& ctx, const BenchOptions& o) {
  Measured m;
  be.synchronize();
  for (int i = 0; i < o.warmup + o.steps; ++i) {
    const double t0 = now_s();
    const std::uint64_t syncs0 = be.host_syncs();
    const StepStats st = trainer.step();
    const std::uint64_t step_syncs = be.host_syncs() - syncs0;
    be.synchronize();
    const double wall = ctx.world->all_reduce_max(now_s() - t0);
    m.finite = m.finite && std::isfinite(st.loss) && st.nonfinite_rank < 0;
    m.last_loss = st.loss;
    if (ctx.world_rank == 0)
      std::printf("  step %3d%s  %9.2f ms  loss %.4f\n", i + 1, i < o.warmup ? " (warm-up)" : "",
                  1e3 * wall, st.loss);
    if (i < o.warmup) continue;
    m.skipped += st.skipped ? 1 : 0;
    m.host_syncs = step_syncs;
    m.wall_s.push_back(wall);
    m.compute_s.push_back(st.acct.compute_s);
    m.pp_wait_s.push_back(st.acct.pp_wait_s);
    m.optimizer_s.push_back(st.acct.optimizer_s);
    m.trainer_s.push_back(st.acct.step_s);
    m.last = st.acct;
  }
  std::vector<double> shares;
  for (int i = 0; i < 2; ++i) {
    be.reset();
    const double t0 = now_s();
    trainer.step();
    const double kernels = be.kernel_seconds();
    shares.push_back(kernels / std::max(1e-12, now_s() - t0));
    be.set_enabled(false);
  }
  const double mine = 0.5 * (shares[0] + shares[1]);
  m.kernel_share = -ctx.world->all_reduce_max(-mine);  // of the rank with the most gaps
  return m;
}

// A flat JSON object written field by field (numbers, strings, booleans).
class JsonObject {
 public:
  JsonObject& num(const char* key, double v) {
    char b[64];
    std::snprintf(b, sizeof b, "%.10g", std::isfinite(v) ? v : -1.0);
    return raw(key, b);
  }
  JsonObject& str(const char* key, const std::string& v) { return raw(key, "\"" + v + "\""); }
  JsonObject& flag(const char* key, bool v) { return raw(key, v ? "true" : "false"); }
  std::string text() const { return "{" + body_ + "}\n"; }

 private:
  JsonObject& raw(const char* key, const std::string& v) {
    body_ += (body_.empty() ? "\"" : ", \"") + std::string(key) + "\": " + v;
    return *this;
  }
  std::string body_;
};

struct Report {
  std::string text, json;
};

Report report(const BenchOptions& o, const DiTConfig& cfg, const Measured& m, int ranks,
              const std::string& comms, std::size_t optimizer_bytes) {
  const double flops = 3.0 * cfg.forward_flops();  // per training image, the project's count
  const double paper = o.input_size == 32 ? 6e9 * paper_gmacs(o.model) : 0.0;
  const double peak = o.peak_tflops > 0 ? o.peak_tflops : (o.backend == "cuda" ? 989.0 : 0.215);
  const double med = quantile(m.wall_s, 0.5), images_s = double(o.batch) / med;
  // The peak is per GPU on cuda and per machine on cpu (ranks on one machine share its cores).
  const int peak_units = o.backend == "cuda" ? ranks : node_count();
  const double tflops = flops * images_s / 1e12, mfu = tflops / (peak * peak_units);
  const double compute = quantile(m.compute_s, 0.5), wait = quantile(m.pp_wait_s, 0.5),
               opt = quantile(m.optimizer_s, 0.5), inside = quantile(m.trainer_s, 0.5);
  const double ms[4] = {1e3 * quantile(m.wall_s, 0.0), 1e3 * quantile(m.wall_s, 0.1),
                        1e3 * quantile(m.wall_s, 0.9), 1e3 * quantile(m.wall_s, 1.0)};
  std::string paper_note;
  if (paper > 0 && std::fabs(paper / flops - 1) > 0.01) {
    char b[128];
    std::snprintf(b, sizeof b, "; the paper's 6 x %.2f GMACs = %.1f GFLOP", paper_gmacs(o.model), paper / 1e9);
    paper_note = b;
  }
  char buf[1536];
  std::snprintf(buf, sizeof buf,
                "%s: %dx%dx%d latents, %s %s, batch %lld (micro %d), %d rank%s, %d timed steps after %d warm-up\n"
                "  images/s %.2f   ms/step median %.2f (min %.2f, p10 %.2f, p90 %.2f, max %.2f)\n"
                "  phases, median ms: compute %.2f, pp wait %.2f, optimizer %.2f, rest of step %.2f, "
                "device drain after the step %.2f%s\n"
                "  TFLOP/s %.2f, MFU %.1f%% of %.4g TFLOP/s per %s; %.1f GFLOP per training image "
                "(3 x forward, project count)%s\n"
                "  host syncs per step %llu; time inside primitives %.1f%% of a step, gaps %.1f%% (timeline marks)\n",
                o.name.c_str(), o.channels, o.input_size, o.input_size, o.backend.c_str(), o.precision.c_str(),
                static_cast<long long>(o.batch), o.micro_batch, ranks, ranks == 1 ? "" : "s", o.steps, o.warmup,
                images_s, 1e3 * med, ms[0], ms[1], ms[2], ms[3], 1e3 * compute, 1e3 * wait, 1e3 * opt,
                1e3 * std::max(0.0, inside - compute - wait - opt), 1e3 * std::max(0.0, med - inside),
                o.backend == "cpu" ? "" : " (host clocks: device work queued in one phase may finish in a later one)",
                tflops, 100 * mfu, peak, o.backend == "cuda" ? "GPU" : "machine", flops / 1e9, paper_note.c_str(),
                static_cast<unsigned long long>(m.host_syncs), 100 * m.kernel_share, 100 * (1 - m.kernel_share));
  JsonObject j;
  j.str("name", o.name).str("impl", "dit_mp").str("model", o.model).num("input_size", o.input_size);
  j.num("channels", o.channels).str("backend", o.backend).str("precision", o.precision);
  j.num("batch", double(o.batch)).num("micro_batch", o.micro_batch).num("ranks", ranks);
  j.num("steps", o.steps).num("warmup", o.warmup).num("params", double(cfg.num_params()));
  j.num("flops_per_image", flops).num("paper_flops_per_image", paper);
  j.num("images_per_s", images_s).num("ms_per_step", 1e3 * med).num("ms_per_step_min", ms[0]);
  j.num("ms_per_step_p10", ms[1]).num("ms_per_step_p90", ms[2]).num("ms_per_step_max", ms[3]);
  j.num("compute_ms", 1e3 * compute).num("pp_wait_ms", 1e3 * wait).num("optimizer_ms", 1e3 * opt);
  j.num("trainer_step_ms", 1e3 * inside).num("tflops", tflops).num("mfu", mfu);
  j.num("peak_tflops_per_unit", peak).num("peak_units", peak_units);
  j.num("final_loss", m.last_loss).flag("loss_finite", m.finite).num("skipped_steps", m.skipped);
  j.num("activation_bytes", double(m.last.activation_bytes)).num("optimizer_state_bytes", double(optimizer_bytes));
  j.num("peak_rss_bytes", double(peak_rss_bytes())).str("comms", comms);
  j.num("host_syncs_per_step", double(m.host_syncs)).num("kernel_share", m.kernel_share);
  return Report{buf, j.text()};
}

int run(const BenchOptions& opt) {
  BenchOptions o = opt;
  int world = 1, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (o.model.rfind("DiT-", 0) != 0) o.model = "DiT-" + o.model;  // "XL/2" names the same preset
  if (o.name.empty()) o.name = o.model;
  if (o.micro_batch <= 0) o.micro_batch = static_cast<int>(o.batch / world);
  DiTConfig cfg;
  std::unique_ptr<Backend> be;
  // Every rank checks; the lowest failing one prints, and all end (no hang).
  collective_check([&] {
    cfg = dit_preset(o.model);
    cfg.input_size = o.input_size;
    cfg.in_channels = o.channels;
    cfg.num_classes = o.num_classes;
    cfg.validate();
    DIT_CHECK(o.steps >= 1 && o.warmup >= 0, "--steps must be >= 1 and --warmup >= 0");
    BatchPlan::make(o.batch, world, o.micro_batch);
  });
  // On cuda this places the rank on a GPU of its node (node-local rank modulo the GPUs there).
  be = make_rank_backend(o.backend, o.precision);  // collective, agrees on failures itself
  ParallelContext ctx = make_mpi_context(Layout{1, 1, world});
  const std::string comms = attach_backend_comms(ctx, *be);
  // Random latents: throughput does not depend on the data. Enough samples for several steps.
  SyntheticDataset data({o.channels, o.input_size, o.input_size}, std::min(o.num_classes, 1000),
                        std::max<std::int64_t>(4 * o.batch, 64), o.seed);
  TimedBackend timed(*be);  // the Trainer's view of the backend; communicators keep the real one
  TrainConfig tc;
  tc.global_batch = o.batch;
  tc.micro_batch = o.micro_batch;
  tc.steps = o.warmup + o.steps + 2;
  tc.adamw.lr = o.lr;
  tc.adamw.weight_decay = 0.0;
  tc.seed = o.seed;
  const double t_setup = now_s();
  Trainer trainer(timed, ctx, cfg, tc, data);
  be->synchronize();
  if (rank == 0)
    std::printf("bench_train: %s (%lld parameters, %d tokens), %s backend, %s, batch %lld = %d rank(s) x %d x %d,"
                " comms: %s; set up in %.1f s\n",
                o.model.c_str(), cfg.num_params(), cfg.num_patches(), be->name().c_str(), o.precision.c_str(),
                static_cast<long long>(o.batch), world, o.micro_batch, trainer.plan().microbatches, comms.c_str(),
                now_s() - t_setup);
  const Measured m = measure(trainer, timed, ctx, o);
  const Report r = report(o, cfg, m, world, comms, trainer.optimizer().state_bytes());
  if (rank == 0) {
    std::fputs(r.text.c_str(), stdout);
    if (!o.json.empty()) std::ofstream(o.json) << r.json;
    if (!m.finite) std::fprintf(stderr, "bench_train: the loss became NaN or Inf\n");
  }
  return m.finite ? 0 : 3;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // progress reaches a log even if a time limit ends the run
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  int rc = 1;
  bool exit_now = false;
  const BenchOptions o = parse(argc, argv, rank, exit_now, rc);
  if (!exit_now) {
    try {
      rc = run(o);
    } catch (const AgreedError& e) {  // every rank has it: rank 0 reports it once
      if (rank == 0) print_error(e.what(), e.origin_rank());
      rc = 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bench_train: rank %d: error: %s\n", rank, e.what());
      std::fflush(stderr);
      if (world > 1) MPI_Abort(MPI_COMM_WORLD, 1);
      rc = 1;
    }
  }
  MPI_Finalize();
  return rc;
}
