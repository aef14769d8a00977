// `dit_mp train` and `dit_mp sample` (see run_cmds.h).
#include "app/run_cmds.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>

#include "app/collective.h"
#include "app/evaluate.h"
#include "app/gather.h"
#include "app/memory_check.h"
#include "app/metrics.h"
#include "app/plots.h"
#include "app/rank_map.h"
#include "app/run_lock.h"
#include "app/sampler.h"
#include "app/signals.h"
#include "app/trainer.h"
#include "backend/cpu/cpu_backend.h"
#include "io/checkpoint.h"
#include "io/file_safety.h"
#include "io/h5_dataset.h"
#include "io/png.h"
#include "io/prepare.h"
#include "io/sample_file.h"
#include "io/weights.h"
#include "parallel/backend_comms.h"
#include "parallel/device_placement.h"

namespace dit {

namespace fs = std::filesystem;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Labels of a grid: one row per class, `per_class` columns.
std::vector<int> grid_labels(const std::vector<int>& classes, int num_classes, int per_class) {
  std::vector<int> rows = classes;
  if (rows.empty()) {
    rows.resize(static_cast<std::size_t>(num_classes));
    std::iota(rows.begin(), rows.end(), 0);
  }
  std::vector<int> labels;
  for (int c : rows)
    for (int i = 0; i < per_class; ++i) labels.push_back(c);
  return labels;
}

// Rank 0 writes the grid PNG (rows = classes) and the samples as HDF5 beside it. Latent models
// (not 1 or 3 channels) get the HDF5 only: their samples need the VAE decoder to become pictures.
// Returns what was written.
std::string write_samples(const DiTConfig& cfg, const std::vector<float>& samples, const std::vector<int>& labels,
                          int per_class, const std::string& png_path) {
  const std::string raw = fs::path(png_path).replace_extension(".h5").string();
  const bool picture = cfg.in_channels == 1 || cfg.in_channels == 3;
  if (world_rank() == 0) {
    const int n = static_cast<int>(labels.size());
    write_samples_h5(raw, samples, labels, cfg.in_channels, cfg.input_size, cfg.input_size);
    if (picture) {
      const Grid g = make_grid(samples.data(), Shape{n, cfg.in_channels, cfg.input_size, cfg.input_size},
                               n / per_class, per_class, 2);
      write_png(png_path, g.width, g.height, g.channels, g.pixels.data());
    }
  }
  return picture ? png_path + " and " + raw : raw + " (latents: decode them with the VAE to see pictures)";
}

// The EMA weights of this rank's stage, in a stage of their own for sampling.
std::unique_ptr<DiTStage> ema_stage(Backend& be, ParallelContext& ctx, Trainer& trainer) {
  DiTStage& model = trainer.model();
  auto ema = std::make_unique<DiTStage>(be, model.config(), model.layouts(), *ctx.tp, ctx.layout.dp);
  std::vector<float> flat = gather_shards(be, trainer.optimizer(), trainer.optimizer().shard().ema(), ctx);
  be.copy(ema->params().flat_values(), Tensor{flat.data(), DType::F32, {std::int64_t(flat.size())}, Device::Host});
  return ema;
}

// A resumed run rewrites the steps after its checkpoint: their old metrics rows go.
void drop_metrics_after(const fs::path& path, std::int64_t step) {
  std::ifstream in(path);
  if (!in) return;
  std::vector<std::string> keep;
  for (std::string line; std::getline(in, line);) {
    const auto at = line.find("\"step\": ");
    if (at != std::string::npos && std::stoll(line.substr(at + 8)) > step) continue;
    keep.push_back(line);
  }
  in.close();
  std::ofstream out(path, std::ios::trunc);
  for (const auto& l : keep) out << l << "\n";
}

std::string checkpoint_root(const RunConfig& cfg) {
  return cfg.run.checkpoint_dir.empty() ? (fs::path(cfg.run.dir) / "ckpt").string() : cfg.run.checkpoint_dir;
}

// --resume continues a run from a checkpoint (any layout wrote it); --init-from starts a new run
// from weights (a checkpoint or a weights file), with fresh optimizer state and the EMA at them.
void start_from_checkpoint(const RunConfig& cfg, const std::string& root, const DiTConfig& model,
                           ParallelContext& ctx, Trainer& trainer, ConsoleLog& console) {
  std::string path = cfg.run.resume == "auto" ? latest_checkpoint(root) : cfg.run.resume;
  const bool resume = !path.empty();
  if (!resume) path = cfg.run.init_from;
  if (path.empty()) {
    if (cfg.run.resume == "auto" && ctx.world_rank == 0)
      console.line("no checkpoint under " + root + ": starting from scratch");
    return;
  }
  const double t0 = now_s();
  StageState state;
  const DiTStage& stage = trainer.model();
  const bool weights_file = !resume && fs::is_regular_file(path) && fs::path(path).filename() != "index.h5";
  CheckpointMeta meta;
  if (weights_file) {
    // Read in fp32 on the host, whatever the training precision, so the fp32 master weights get
    // the file's values rather than their 16-bit rounding (restore() sets params and master).
    const ParamSet& ps = trainer.model().params();
    CpuBackend host;
    ParamSet fp32(host, ps.specs(), ps.tp(), ps.tp_rank(), ps.padded_numel());
    collective_check([&] { load_weights(path, fp32); });  // every rank reads it: one message
    state = trainer.state();
    state.model = host_copy(host, fp32.flat_values());
    state.ema = state.model;
    std::fill(state.exp_avg.begin(), state.exp_avg.end(), 0.f);
    std::fill(state.exp_avg_sq.begin(), state.exp_avg_sq.end(), 0.f);
  } else if (cfg.run.resume == "auto") {  // the newest checkpoint that verifies
    std::vector<std::string> skipped;
    meta = load_newest_checkpoint(root, model, stage.params(), ctx, state, skipped);
    for (const std::string& s : skipped)
      if (ctx.world_rank == 0) console.line("skipped checkpoint " + s);
  } else {
    meta = load_checkpoint(path, model, stage.params(), ctx, state);
    if (!resume) {  // weights only
      state.ema = state.model;
      std::fill(state.exp_avg.begin(), state.exp_avg.end(), 0.f);
      std::fill(state.exp_avg_sq.begin(), state.exp_avg_sq.end(), 0.f);
    }
  }
  LossScaleState scaling;
  if (resume) scaling = {meta.loss_scale, meta.loss_scale_clean_steps, meta.skipped_steps, meta.loss_scaling};
  trainer.restore(state, resume ? meta.step : 0, scaling);
  if (resume && ctx.world_rank == 0) drop_metrics_after(fs::path(cfg.run.dir) / "metrics.jsonl", meta.step);
  if (ctx.world_rank == 0) {
    char took[32];
    std::snprintf(took, sizeof took, " in %.2f s", now_s() - t0);
    console.line((resume ? "resumed from " + meta.dir + " at step " + std::to_string(meta.step) + " (written at " +
                               meta.layout.str() + ")"
                         : "initialized from " + path) + took);
  }
}

struct RunPaths {
  fs::path dir;
  fs::path metrics() const { return dir / "metrics.jsonl"; }
};

// Prints the per-rank accounting of the last step as a table (rank 0) and writes it as JSON: time,
// communication bytes (ring bytes, comm.h), bubble, and the memory by category (MemoryAccount,
// the numbers `dit_mp plan` predicts).
void report_accounting(ParallelContext& ctx, const StepAccounting& a, const MemoryAccount& mem,
                       const fs::path& json_path) {
  const std::vector<std::pair<const char*, double>> mine = {
      {"step_s", a.step_s},
      {"compute_s", a.compute_s},
      {"pp_wait_s", a.pp_wait_s},
      {"optimizer_s", a.optimizer_s},
      {"tp_bytes", double(a.tp_bytes)},
      {"pp_bytes", double(a.pp_bytes)},
      {"dp_bytes", double(a.dp_bytes)},
      {"measured_bubble", a.measured_bubble},
      {"theoretical_bubble", a.theoretical_bubble},
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
      {"total_bytes", double(mem.total())},
  };
  const int n = ctx.world->size();
  const std::size_t k = mine.size();
  std::vector<double> cols(static_cast<std::size_t>(n) * k, 0.0);
  for (std::size_t i = 0; i < k; ++i) cols[k * ctx.world_rank + i] = mine[i].second;
  ctx.world->all_reduce_sum(cols.data(), static_cast<int>(cols.size()));
  if (ctx.world_rank != 0) return;
  auto col = [&](int r, const char* name) {
    for (std::size_t i = 0; i < k; ++i)
      if (std::string(mine[i].first) == name) return cols[k * r + i];
    return 0.0;
  };
  std::printf("\nper-rank accounting of the last step (%s):\n", ctx.layout.str().c_str());
  std::printf("%5s %4s %4s %4s %9s %11s %11s %11s %9s %9s %12s %12s %12s\n", "rank", "tp", "pp", "dp", "step_s",
              "tp_bytes", "pp_bytes", "dp_bytes", "bubble", "theory", "optim_state", "activations", "total");
  std::ofstream js(json_path);
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
    js << "}" << (r + 1 < n ? ",\n" : "\n");
  }
  js << "]\n";
}

}  // namespace

TrainConfig train_config(const RunConfig& c) {
  TrainConfig t;
  t.global_batch = c.train.global_batch;
  t.micro_batch = c.train.micro_batch;
  t.steps = c.train.steps;
  t.adamw.lr = c.train.lr;
  t.adamw.beta1 = c.train.beta1;
  t.adamw.beta2 = c.train.beta2;
  t.adamw.eps = c.train.eps;
  t.adamw.weight_decay = c.train.weight_decay;
  t.warmup = c.train.warmup;
  t.lr_schedule = c.train.lr_schedule == "cosine" ? LrSchedule::Cosine : LrSchedule::Constant;
  t.min_lr = c.train.min_lr;
  t.grad_clip = c.train.grad_clip;
  t.loss_scale = c.train.loss_scale;
  t.loss_scale_window = c.train.loss_scale_window;
  t.ema_decay = c.train.ema_decay;
  t.ema_warmup = c.train.ema_warmup;
  t.seed = c.train.seed;
  t.schedule = parse_schedule(c.parallel.schedule);
  t.pp_layers = c.parallel.pp_layers;
  t.virtual_stages = c.parallel.virtual_stages;
  t.stage.recompute = parse_recompute(c.train.recompute);
  t.stage.recompute_blocks = c.train.recompute_blocks;
  t.stage.sequence_parallel = c.parallel.sequence_parallel;
  t.grad_reduce = c.train.grad_reduce == "bf16" ? DType::BF16 : DType::F32;
  t.diffusion_steps = c.diffusion.steps;
  return t;
}

// --dry-run: the layout and where every rank runs, without touching data or the run folder.
int dry_run(const RunConfig& cfg, const Layout& layout) {
  std::unique_ptr<Backend> be = make_rank_backend(cfg.train.backend, cfg.train.precision);
  ParallelContext ctx = make_mpi_context(layout);
  const std::string device =
      cfg.train.backend.rfind("cuda", 0) == 0 ? "cuda:" + std::to_string(place_rank_on_gpu().device) : "";
  const std::string map = rank_map(ctx, device);
  if (ctx.world_rank == 0)
    std::printf("dit_mp train --dry-run: %s, %s backend, model %lld parameters, run folder %s (not touched)\n%s",
                layout.str().c_str(), be->name().c_str(), static_cast<long long>(cfg.model.dit.num_params()),
                cfg.run.dir.c_str(), map.c_str());
  return 0;
}

int run_train(const RunConfig& cfg, TrainMode mode) {
  const DiTConfig& model = cfg.model.dit;
  Layout layout;
  RunPaths paths{fs::path(cfg.run.dir)};
  install_stop_handlers();
  RunLock lock;  // rank 0 holds the run folder's lock until this function returns
  const int ranks_per_node = std::max(1, world_size() / node_count());
  collective_check([&] {
    layout = layout_for_world(cfg.parallel.tp, cfg.parallel.pp);
    DIT_CHECK(model.num_heads % layout.tp == 0 && model.mlp_hidden() % layout.tp == 0,
              "parallel.tp = ", layout.tp, " does not divide model.num_heads = ", model.num_heads,
              " and the MLP width ", model.mlp_hidden());
    check_stage_options(train_config(cfg).stage, partition_chunks(model, layout.pp, cfg.parallel.virtual_stages,
                                                                   cfg.parallel.pp_layers));
    const BatchPlan bp = BatchPlan::make(cfg.train.global_batch, layout.dp, cfg.train.micro_batch);
    check_virtual_stages(parse_schedule(cfg.parallel.schedule), layout.pp, bp.microbatches,
                         cfg.parallel.virtual_stages);
    check_memory_fits(training_memory_need(cfg, layout), ranks_per_node,
                      "the model.* sizes, train.micro_batch or sample.per_class");
    std::string why;
    DIT_CHECK(backend_available(backend_name(cfg.train.backend, cfg.train.precision), &why), "train.backend = ",
              cfg.train.backend, " with train.precision = ", cfg.train.precision, ": ", why);
    if (mode == TrainMode::DryRun) return;
    if (world_rank() == 0) {  // before the folder is looked at, overwritten or resumed
      std::string note;
      lock = RunLock::acquire(paths.dir.string(), &note);
      if (!note.empty()) std::printf("note: %s\n", note.c_str());
    }
    if (world_rank() == 0 && fs::exists(paths.dir) && !cfg.run.overwrite && cfg.run.resume.empty())
      DIT_FAIL("run folder ", paths.dir.string(),
               " already exists: choose another run.dir, continue it with --resume auto, or pass --overwrite");
    DIT_CHECK(cfg.run.resume.empty() || !cfg.run.overwrite, "run.resume and run.overwrite exclude each other");
    DIT_CHECK(cfg.run.resume.empty() || cfg.run.init_from.empty(),
              "run.resume and run.init_from exclude each other (resume continues a run, init_from starts one)");
  });
  if (mode == TrainMode::DryRun) return dry_run(cfg, layout);
  // Data: the demo prepares Fashion-MNIST on first use (rank 0 writes, atomically).
  collective_check([&] {
    if (world_rank() == 0 && !fs::exists(cfg.data.path)) {
      DIT_CHECK(cfg.data.prepare == "fashion-mnist", "data.path = ", cfg.data.path,
                " does not exist (and data.prepare = ", cfg.data.prepare, "); create it with dit_mp prepare-data");
      std::printf("preparing Fashion-MNIST into %s\n", cfg.data.path.c_str());
      if (fs::path(cfg.data.path).has_parent_path()) fs::create_directories(fs::path(cfg.data.path).parent_path());
      prepare_fashion_mnist(kFashionMnistDir, cfg.data.path, "train");
    }
  });
  // Sample quality during training: the reference set and classifier ready before step 1.
  std::unique_ptr<QualityJudge> judge;
  collective_check([&] {
    if (cfg.train.eval_every == 0 || world_rank() != 0) return;
    prepare_evaluation(eval_paths(cfg), cfg.data.prepare);
    judge = std::make_unique<QualityJudge>(eval_paths(cfg));
  });
  std::unique_ptr<Dataset> data;
  collective_check([&] {
    data = open_dataset(cfg.data.path, cfg.data.latent_scale);
    const SampleShape s = data->shape();
    DIT_CHECK(s.channels == model.in_channels && s.height == model.input_size && s.width == model.input_size,
              cfg.data.path, " holds ", s.channels, "x", s.height, "x", s.width, " samples but the model takes ",
              model.in_channels, "x", model.input_size, "x", model.input_size, " (model.in_channels, model.input_size)");
    DIT_CHECK(data->num_classes() <= model.num_classes, cfg.data.path, " has ", data->num_classes(),
              " classes but model.num_classes = ", model.num_classes);
    if (world_rank() == 0) {
      if (fs::exists(paths.dir) && cfg.run.resume.empty()) fs::remove_all(paths.dir);
      probe_writable(paths.dir.string(), "run.dir", "rank0");  // creates it
      std::ofstream(paths.dir / "config.toml") << cfg.to_toml();
    }
  });
  // Every rank writes its shard of each checkpoint: find an unwritable folder now, not steps later.
  collective_check([&] { probe_writable(checkpoint_root(cfg), "run.checkpoint_dir", "rank" + std::to_string(world_rank())); });

  std::unique_ptr<Backend> be;
  be = make_rank_backend(cfg.train.backend, cfg.train.precision);
  be->set_deterministic(cfg.train.deterministic);
  ParallelContext ctx = make_mpi_context(layout);
  ctx.watch->timeout_s = cfg.parallel.timeout_s;
  ctx.watch->stop_signal = stop_signal_flag();
  const std::string comms = attach_backend_comms(ctx, *be);
  const std::string device =
      cfg.train.backend.rfind("cuda", 0) == 0 ? "cuda:" + std::to_string(place_rank_on_gpu().device) : "";
  const std::string map = rank_map(ctx, device);
  // The NCCL lanes join pipeline neighbours in one order; interleaving wraps the last stage
  // around to the first.
  DIT_CHECK(comms != "nccl" || cfg.parallel.virtual_stages == 1, "parallel.virtual_stages = ",
            cfg.parallel.virtual_stages, " runs over MPI point-to-point only: set DIT_COMM=mpi or use 1");
  const TrainConfig tc = train_config(cfg);
  Trainer trainer = allocating("building the model and its optimizer state (model.* sizes)",
                               [&] { return Trainer(*be, ctx, model, tc, *data); });
  MetricsWriter metrics(ctx.world_rank == 0 ? paths.metrics().string() : "");
  ConsoleLog console;
  const std::string ckpt_root = checkpoint_root(cfg);
  start_from_checkpoint(cfg, ckpt_root, model, ctx, trainer, console);
  if (ctx.world_rank == 0) {
    std::ostringstream os;
    os << "dit_mp train: " << layout.str() << ", " << be->name() << " backend in " << dtype_name(be->compute_dtype())
       << " (communication: " << comms << "), model " << model.num_params()
       << " parameters (depth " << model.depth << ", hidden " << model.hidden_size << ", heads " << model.num_heads
       << ", patch " << model.patch_size << ", " << model.num_patches() << " tokens), data "
       << data->describe() << "\nglobal batch " << tc.global_batch << " = dp " << layout.dp << " x micro "
       << tc.micro_batch << " x " << trainer.plan().microbatches << " microbatches, " << tc.steps
       << " steps, pipeline schedule " << schedule_name(tc.schedule)
       << (tc.virtual_stages > 1 ? " interleaved over " + std::to_string(tc.virtual_stages) + " virtual stages" : "")
       << ", run folder " << paths.dir.string() << "\nresolved config:\n" << cfg.to_toml() << map;
    console.line(os.str());
  }
  ctx.watch->phase = "training";  // start-up's allowance ends; each step sets its own phase
  ctx.watch->factor = 1;
  const double flops_per_image = 3.0 * model.forward_flops();
  // The peak is per GPU on the CUDA backend and per machine on the CPU backend (ranks on one
  // machine share its cores).
  const double peak_tflops = cfg.train.peak_tflops * (cfg.train.backend == "cuda" ? ctx.world->size() : node_count());
  const double t0 = now_s();
  double window_s = 0;
  std::int64_t window_steps = 0;
  StepStats st;
  // The EMA's samples: per_class images of each of `classes` (all when empty), on every rank.
  auto draw_ema = [&](const std::vector<int>& classes, int per_class, int num_steps, const std::string& what) {
    WatchPhase watch(ctx.watch.get(), "sampling", CommWatch::kSlowPhaseFactor);
    auto ema = ema_stage(*be, ctx, trainer);
    SampleRequest req;
    req.labels = grid_labels(classes, model.num_classes, per_class);
    req.num_steps = num_steps;
    req.sampler = cfg.sample.sampler;
    req.cfg_scale = cfg.sample.cfg_scale;
    req.cfg_official = cfg.sample.cfg_official;
    req.cfg_t_min = cfg.sample.cfg_t_min, req.cfg_t_max = cfg.sample.cfg_t_max;
    req.diffusion_steps = cfg.diffusion.steps;
    req.seed = cfg.sample.seed;
    Progress progress("sampling " + std::to_string(req.labels.size()) + " images: step", num_steps,
                      ctx.world_rank == 0);
    req.progress = &progress;
    auto samples = allocating("sampling " + std::to_string(req.labels.size()) + " images (" + what + ")",
                              [&] { return sample_images(*be, ctx, *ema, req); });
    return std::make_pair(std::move(samples), req.labels);
  };
  auto sample_grid = [&](const std::string& name) {
    const auto [samples, labels] = draw_ema(cfg.sample.classes, cfg.sample.per_class, cfg.sample.num_steps,
                                            "sample.per_class");
    const std::string wrote = write_samples(model, samples, labels, cfg.sample.per_class, (paths.dir / name).string());
    if (ctx.world_rank == 0) console.line("wrote " + wrote);
  };
  // Cheap settings ([eval]): every class; rank 0 judges the samples.
  auto evaluate = [&](std::int64_t step) {
    auto [samples, labels] = draw_ema({}, cfg.eval.per_class, cfg.eval.num_steps, "eval.per_class");
    if (ctx.world_rank != 0) return;
    eval::ImageSet set;
    set.n = std::int64_t(labels.size());
    set.c = model.in_channels, set.h = model.input_size, set.w = model.input_size;
    set.pixels = std::move(samples);
    set.labels = std::move(labels);
    const QualityReport r = judge->judge(set);
    metrics.write_eval(step, quality_json(r));
    char text[256];
    std::snprintf(text, sizeof text,
                  "eval step %lld: FID %.2f (real-data floor %.2f), precision %.3f, recall %.3f, class accuracy "
                  "%.1f%% (real %.1f%%), %lld samples",
                  static_cast<long long>(step), r.samples.fid, r.floor.fid, r.samples.precision, r.samples.recall,
                  100 * r.samples.class_accuracy, 100 * r.floor.class_accuracy, static_cast<long long>(r.samples.n));
    console.line(text);
  };
  auto checkpoint = [&] {
    WatchPhase watch(ctx.watch.get(), "checkpoint save", CommWatch::kSlowPhaseFactor);
    ctx.watch->stop_grace = false;  // saving may take long; parallel.timeout_s still bounds each wait
    const double t = now_s();
    CheckpointMeta meta;
    meta.step = trainer.next_step();
    meta.config_toml = cfg.to_toml();
    meta.seed = cfg.train.seed;
    const LossScaleState& ls = trainer.loss_scaler().state();
    meta.loss_scale = ls.scale;
    meta.loss_scale_clean_steps = ls.clean_steps;
    meta.skipped_steps = ls.skipped_steps;
    meta.loss_scaling = ls.active;
    const std::string dir = save_checkpoint(ckpt_root, meta, model, trainer.model().params(), ctx, trainer.state(),
                                            cfg.train.keep_checkpoints);
    if (ctx.world_rank == 0) {
      char took[32];
      std::snprintf(took, sizeof took, "%.2f s", now_s() - t);
      console.line("saved checkpoint " + dir + " in " + took);
    }
    ctx.watch->stop_grace = true;
  };
  std::int64_t steps_run = 0;
  for (std::int64_t s = trainer.next_step(); s < tc.steps; ++s) {
    st = trainer.step();
    ++steps_run;
    window_s += st.acct.step_s;
    ++window_steps;
    const bool log = (s + 1) % cfg.train.log_every == 0 || s + 1 == tc.steps || st.nonfinite_rank >= 0 ||
                     st.nonfinite_at_scale_one;
    if (log) {
      const double step_s = window_s / double(window_steps);
      LogRow r;
      r.step = s + 1;
      r.total = tc.steps;
      r.loss = st.loss;
      r.mse = st.mse;
      r.vb = st.vb;
      r.grad_norm = st.grad_norm;
      r.lr = st.lr;
      r.images_per_s = double(tc.global_batch) / step_s;
      r.tflops = flops_per_image * r.images_per_s / 1e12;
      r.mfu = r.tflops / peak_tflops;
      r.peak_mem_bytes = static_cast<std::uint64_t>(ctx.world->all_reduce_max(double(peak_rss_bytes())));
      r.elapsed_s = now_s() - t0;
      r.eta_s = step_s * double(tc.steps - s - 1);
      r.loss_scale = st.loss_scale;
      r.skipped_steps = trainer.loss_scaler().state().skipped_steps;
      metrics.write(r);
      if (ctx.world_rank == 0) console.step(r);
      window_s = 0;
      window_steps = 0;
    }
    if (st.nonfinite_at_scale_one) {
      if (ctx.world_rank == 0)
        print_error(("the gradients are Inf or NaN at step " + std::to_string(s + 1) +
                     " even at fp16 loss scale 1: the model diverged (try bf16, a lower train.lr or "
                     "train.grad_clip); metrics are in " + paths.metrics().string())
                        .c_str());
      return 1;
    }
    if (st.nonfinite_rank >= 0) {
      if (ctx.world_rank == 0)
        print_error(("the loss became NaN or Inf at step " + std::to_string(s + 1) + " on rank " +
                     std::to_string(st.nonfinite_rank) + "; metrics are in " + paths.metrics().string())
                        .c_str());
      return 1;
    }
    const bool saved = cfg.train.checkpoint_every > 0 && (s + 1) % cfg.train.checkpoint_every == 0 && s + 1 < tc.steps;
    if (saved) checkpoint();
    if (cfg.train.sample_every > 0 && (s + 1) % cfg.train.sample_every == 0 && s + 1 < tc.steps) {
      char name[64];
      std::snprintf(name, sizeof name, "samples_step_%07lld.png", static_cast<long long>(s + 1));
      sample_grid(name);
    }
    if (cfg.train.eval_every > 0 && (s + 1) % cfg.train.eval_every == 0 && s + 1 < tc.steps) evaluate(s + 1);
    // A stop signal on any rank (preemption, time limit): all agree here, save, and exit.
    if (s + 1 < tc.steps) {
      if (const int sig = agree_stop(*ctx.world)) {
        if (!saved) checkpoint();
        const int more = stop_signal_count() - 1;  // later signals (e.g. during the save) only count
        if (ctx.world_rank == 0)
          console.line("stopping after step " + std::to_string(s + 1) + " of " + std::to_string(tc.steps) +
                       ": received " + signal_name(sig) + " (preemption, time limit or scancel" +
                       (more > 0 ? "; " + std::to_string(more) + " more signal(s) on rank 0 ignored" : "") +
                       "); the checkpoint of step " +
                       std::to_string(s + 1) + " is saved; exit code " + std::to_string(kExitPreempted) +
                       ": run again with --resume auto to continue");
        return kExitPreempted;
      }
    }
  }
  ctx.watch->factor = CommWatch::kSlowPhaseFactor;  // the final save, weights and samples
  ctx.watch->phase = "finishing";
  checkpoint();
  if (steps_run > 0)
    report_accounting(ctx, st.acct, trainer.memory(), paths.dir / "accounting.json");
  // Final weights (model and EMA) for `dit_mp sample`, then the final grid. They come from the
  // fp32 master weights and EMA, so a bf16/fp16 run saves them unrounded.
  const StageState final_state = trainer.state();
  auto model_w = gather_global(trainer.model(), ctx, final_state.model);
  auto ema_w = gather_global(trainer.model(), ctx, final_state.ema);
  if (ctx.world_rank == 0) {
    save_weights((paths.dir / "model.h5").string(), model, model_w, cfg.diffusion.steps);
    save_weights((paths.dir / "ema.h5").string(), model, ema_w, cfg.diffusion.steps);
  }
  sample_grid("samples.png");
  if (cfg.train.eval_every > 0) evaluate(tc.steps);
  if (ctx.world_rank == 0) {
    console.line("done in " + format_duration(now_s() - t0) + "; samples: " + (paths.dir / "samples.png").string());
    const std::string plots = write_run_plots(paths.dir.string());
    if (!plots.empty()) console.line(plots);
  }
  return 0;
}

SampledImages sample_from_weights(const SampleOptions& requested) {
  SampleOptions opt = requested;
  Layout layout;
  std::string weights = opt.weights;
  DiTConfig model;
  int diffusion_steps = 1000;
  const int ranks_per_node = std::max(1, world_size() / node_count());
  collective_check([&] {
    DIT_CHECK(opt.run_dir.empty() != opt.weights.empty(), "give exactly one of --run DIR or --weights FILE");
    if (!opt.run_dir.empty()) {
      weights = (fs::path(opt.run_dir) / "ema.h5").string();
      const fs::path config = fs::path(opt.run_dir) / "config.toml";
      if (fs::is_regular_file(config)) {  // sample as the run says where the command line is silent
        const SampleSection s = RunConfig::from_file(config.string()).sample;
        const SampleOptions::Given& g = opt.given;
        if (!g.steps) opt.steps = s.num_steps;
        if (!g.sampler) opt.sampler = s.sampler;
        if (!g.cfg_scale) opt.cfg_scale = s.cfg_scale;
        if (!g.cfg_official) opt.cfg_official = s.cfg_official;
        if (!g.cfg_t_min) opt.cfg_t_min = s.cfg_t_min;
        if (!g.cfg_t_max) opt.cfg_t_max = s.cfg_t_max;
      }
    }
    DIT_CHECK(fs::exists(weights), weights, " does not exist",
              opt.run_dir.empty() ? "" : " (a run writes ema.h5 when its training finishes)");
    model = read_weights_config(weights);
    diffusion_steps = read_weights_diffusion_steps(weights);
    layout = layout_for_world(opt.tp, opt.pp);
    partition_stages(model, layout.pp);
    DIT_CHECK(model.num_heads % layout.tp == 0, "--tp ", layout.tp, " does not divide the model's ",
              model.num_heads, " heads");
    for (int c : opt.classes)
      DIT_CHECK(c >= 0 && c < model.num_classes, "--classes: class ", c, " outside [0, ", model.num_classes, ")");
    DIT_CHECK(opt.per_class >= 1 && opt.per_class <= 100000 && opt.steps >= 2 && opt.steps <= diffusion_steps &&
                  opt.cfg_scale >= 1.0,
              "--per-class in [1, 100000], 2 <= --steps <= ", diffusion_steps,
              " (the model's diffusion.steps) and --cfg-scale >= 1 are required");
    DIT_CHECK(opt.sampler == "ddim" || opt.sampler == "ddpm", "--sampler ", opt.sampler, ": expected ddim or ddpm");
    DIT_CHECK(opt.cfg_t_min >= 0 && opt.cfg_t_min <= opt.cfg_t_max && opt.cfg_t_max <= 1, "--cfg-t-min ",
              opt.cfg_t_min, " --cfg-t-max ", opt.cfg_t_max, ": expected 0 <= min <= max <= 1 (noise levels)");
    DIT_CHECK(opt.batch >= 1 && opt.batch <= 1000000, "--batch ", opt.batch, ": expected 1 to 1000000");
    const std::int64_t total =
        std::int64_t(opt.per_class) * std::int64_t(opt.classes.empty() ? model.num_classes : opt.classes.size());
    check_memory_fits(sampling_memory_need(model, layout, std::min<std::int64_t>(total, opt.batch)), ranks_per_node,
                      "--batch");
    std::string why;
    DIT_CHECK(backend_available(backend_name(opt.backend, opt.precision), &why), "--backend ", opt.backend,
              " --precision ", opt.precision, ": ", why);
  });
  std::unique_ptr<Backend> be;
  be = make_rank_backend(opt.backend, opt.precision);
  ParallelContext ctx = make_mpi_context(layout);
  attach_backend_comms(ctx, *be);
  const auto stages = partition_stages(model, layout.pp);
  DiTStage stage(*be, model, stages[ctx.coord.pp], *ctx.tp, layout.dp);
  collective_check([&] { load_weights(weights, stage.params()); });  // every rank reads it: one message
  // Batches of at most opt.batch images; each draws the noise one call for all would (first_index).
  const std::vector<int> labels = grid_labels(opt.classes, model.num_classes, opt.per_class);
  const std::int64_t total = std::int64_t(labels.size()), batches = (total + opt.batch - 1) / opt.batch;
  if (world_rank() == 0) {
    std::printf("sampling: %s, %d steps, CFG %g", opt.sampler.c_str(), opt.steps, opt.cfg_scale);
    if (opt.cfg_scale != 1) std::printf(" at noise levels [%g, %g]", opt.cfg_t_min, opt.cfg_t_max);
    std::printf("\n");
  }
  Progress progress("sampling " + std::to_string(total) + " images" +
                        (batches > 1 ? " in " + std::to_string(batches) + " batches" : "") + ": step",
                    batches * opt.steps, ctx.world_rank == 0);
  SampledImages out;
  out.model = model;
  out.labels = labels;
  for (std::int64_t first = 0; first < total; first += opt.batch) {
    SampleRequest req;
    req.labels.assign(labels.begin() + first, labels.begin() + std::min(total, first + opt.batch));
    req.num_steps = opt.steps;
    req.sampler = opt.sampler;
    req.cfg_scale = opt.cfg_scale;
    req.cfg_official = opt.cfg_official;
    req.cfg_t_min = opt.cfg_t_min, req.cfg_t_max = opt.cfg_t_max;
    req.diffusion_steps = diffusion_steps;
    req.seed = opt.seed;
    req.first_index = first;
    req.progress = &progress;
    const std::vector<float> part =
        allocating("sampling " + std::to_string(req.labels.size()) + " images (--per-class, --batch)",
                   [&] { return sample_images(*be, ctx, stage, req); });
    out.samples.insert(out.samples.end(), part.begin(), part.end());
  }
  return out;
}

int run_sample(const SampleOptions& opt) {
  const SampledImages s = sample_from_weights(opt);
  const std::string wrote = write_samples(s.model, s.samples, s.labels, opt.per_class, opt.out);
  if (world_rank() == 0) std::printf("wrote %s\n", wrote.c_str());
  return 0;
}

}  // namespace dit
