// A training run's life (see run.h).
#include "run/run.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/clock.h"
#include "engine/global_tensors.h"
#include "engine/rank_backend.h"
#include "engine/sampler.h"
#include "io/checkpoint.h"
#include "io/file_safety.h"
#include "io/h5_dataset.h"
#include "io/weights.h"
#include "parallel/agree.h"
#include "parallel/backend_comms.h"
#include "parallel/device_placement.h"
#include "parallel/world.h"
#include "run/accounting.h"
#include "core/trace.h"
#include "run/plan_check.h"
#include "run/plots.h"
#include "run/rank_map.h"
#include "run/resume.h"
#include "run/run_folder.h"
#include "run/run_identity.h"
#include "run/sample_output.h"
#include "run/vae_decode.h"
#include "run/signals.h"
#include "io/atomic_file.h"

namespace dit {

namespace fs = std::filesystem;

namespace {

// Every `every` steps (0: never), except at the last step, which finish() covers.
bool due(int every, std::int64_t done, std::int64_t steps) { return every > 0 && done % every == 0 && done < steps; }

// The EMA weights of this rank's stage, in a stage of their own for sampling.
std::unique_ptr<DiTStage> ema_stage(Backend& be, ParallelContext& ctx, Trainer& trainer) {
  DiTStage& model = trainer.model();
  // The training stage's chunks in its places (ZB-V's V), all tokens, forward only.
  const StageOptions options = StageOptions::forward_only(model.options().placement);
  auto ema = std::make_unique<DiTStage>(be, model.config(), model.layouts(), *ctx.tp, ctx.layout.dp, options);
  std::vector<float> flat = gather_shards(be, trainer.optimizer(), trainer.optimizer().shard().ema(), ctx);
  be.copy(ema->params().flat_values(), Tensor{flat.data(), DType::F32, {std::int64_t(flat.size())}, Device::Host});
  return ema;
}

}  // namespace

// The folder is created (or, under --overwrite, cleared) only once the inputs have loaded: a run
// that cannot start leaves nothing behind.
Run::Run(const RunConfig& cfg, const TrainSetup& setup, std::vector<MemoryAccount> planned)
    : cfg_(cfg), setup_(setup), planned_(std::move(planned)) {
  open_data();
  build_engine();
  start();
  make_folder();
  print_header();
}

Run::~Run() = default;

std::string Run::file(const std::string& name) const { return (fs::path(cfg_.run.dir) / name).string(); }

std::string Run::checkpoint_root() const {
  return cfg_.run.checkpoint_dir.empty() ? file("ckpt") : cfg_.run.checkpoint_dir;
}

void Run::open_data() {
  const DiTConfig& model = setup_.model;
  collective_check([&] {
    data_ = open_dataset(cfg_.data.path, cfg_.data.latent_scale);
    const SampleShape s = data_->shape();
    DIT_CHECK(s.channels == model.in_channels && s.height == model.input_size && s.width == model.input_size,
              cfg_.data.path, " holds ", s.channels, "x", s.height, "x", s.width, " samples but the model takes ",
              model.in_channels, "x", model.input_size, "x", model.input_size, " (model.in_channels, model.input_size)");
    // sample.clip_denoised = auto becomes what this data needs, recorded in config.toml.
    if (cfg_.sample.clip_denoised == ClipSetting::Auto)
      cfg_.sample.clip_denoised = data_->latents() ? ClipSetting::No : ClipSetting::Yes;
    DIT_CHECK(data_->num_classes() <= model.num_classes, cfg_.data.path, " has ", data_->num_classes(),
              " classes but model.num_classes = ", model.num_classes);
    DIT_CHECK(cfg_.data.vae_config.empty() || !cfg_.data.vae.empty(), "data.vae_config = ", cfg_.data.vae_config,
              " without data.vae");
    if (!cfg_.data.vae.empty()) {
      vae_ = open_vae(cfg_.data.vae, cfg_.data.vae_config);
      check_vae_fits(*vae_, model.in_channels, "data.vae");
    }
  });
}

void Run::make_folder() {
  collective_check([&] {
    if (world_rank() != 0) return;
    const fs::path dir(cfg_.run.dir);
    // check_overwritable allowed it; or (ready_run) a fresh run's folder holds only a failed start's files
    if (cfg_.run.overwrite || (cfg_.run.resume.empty() && holds_failed_start(dir.string())))
      clear_run_folder(dir.string());
    probe_writable(dir.string(), "run.dir", "rank0");        // creates it
    write_file_atomic((dir / "config.toml").string(), cfg_.to_toml(), "run config");
  });
  // Every rank writes its shard of each checkpoint: find an unwritable folder now, not steps later.
  collective_check(
      [&] { probe_writable(checkpoint_root(), "run.checkpoint_dir", "rank" + std::to_string(world_rank())); });
  metrics_ = std::make_unique<MetricsWriter>(ctx_.world_rank == 0 ? file("metrics.jsonl") : "");
  collective_check([&] {
    if (ctx_.world_rank != 0 || !cfg_.train.tensorboard) return;
    // A resume's first logged step is next_step() + 1: what an earlier process logged from there
    // on is dropped by TensorBoard (the SessionLog START the writer begins with).
    const std::int64_t first = trainer_->next_step() + 1;
    tensorboard_ = std::make_unique<TensorBoardWriter>(file("tb"), first);
    tensorboard_->text("config", first, "```toml\n" + cfg_.to_toml() + "```");
    tensorboard_->text("layout", first, "```\n" + setup_.layout.str() + "\n" + rank_map_ + "```");
  });
  // The bytes the plan gave this rank's stage, or the Trainer's own account without a plan.
  const double planned = planned_.empty() ? double(trainer_->memory().total())
                                          : double(planned_[static_cast<std::size_t>(ctx_.coord.pp) % planned_.size()].total());
  monitor_ = std::make_unique<RunMonitor>(ctx_, setup_, planned, ctx_.world_rank == 0 ? file("ranks.jsonl") : "",
                                          cfg_.train.straggler_margin);
  profiler_ = std::make_unique<Profiler>(
      ctx_, setup_, cfg_.train.profile.empty() ? ProfileSteps{} : parse_profile_steps(cfg_.train.profile),
      file("trace.json"));
}

void Run::build_engine() {
  RankSetup rank = make_rank({.backend = cfg_.backend_str(),
                              .precision = cfg_.precision_str(),
                              .layout = setup_.layout,
                              .timeout_s = cfg_.parallel.timeout_s,
                              .timeout_setting = "parallel.timeout_s",
                              .stop_signal = stop_signal_flag()});
  be_ = std::move(rank.backend);
  be_->set_deterministic(cfg_.train.deterministic);
  ctx_ = std::move(rank.ctx);
  comms_ = rank.comms;
  rank_map_ = rank_map(ctx_, rank.device);
  // The NCCL lanes join pipeline neighbours in one order; interleaving wraps the last stage
  // around to the first.
  DIT_CHECK(comms_ != "nccl" || cfg_.parallel.virtual_stages == 1, "parallel.virtual_stages = ",
            cfg_.parallel.virtual_stages, " runs over MPI point-to-point only: set DIT_COMM=mpi or use 1");
  trainer_ = allocating("building the model and its optimizer state (model.* sizes)",
                        [&] { return std::make_unique<Trainer>(*be_, ctx_, setup_, *data_); });
}

// The run's identity: a resume continues run.dir's (a --set run.id must match it) and takes its
// checkpoint's; a fresh run takes a given run.id or a new one, and only a checkpoint folder that
// holds no run's checkpoints.
void Run::start() {
  const bool fresh = cfg_.run.resume.empty();
  // A save replaces step folders and keep_checkpoints prunes them: the root holds only a run's own.
  collective_check([&] {
    if (world_rank() == 0) check_checkpoint_root(checkpoint_root());
  });
  if (!fresh) {
    const std::string recorded = recorded_run_id(cfg_.run.dir);
    collective_check([&] {
      DIT_CHECK(cfg_.run.id.empty() || recorded.empty() || cfg_.run.id == recorded, "run.id = ", cfg_.run.id,
                ": run.dir ", cfg_.run.dir, " is run ", recorded, "; a resume continues that run");
    });
    if (!recorded.empty()) cfg_.run.id = recorded;
  } else {
    collective_check([&] {
      if (world_rank() == 0) check_new_checkpoint_root(cfg_, checkpoint_root());
    });
  }
  const std::optional<CheckpointMeta> resumed =
      start_from_checkpoint(cfg_, checkpoint_root(), setup_.model, ctx_, *trainer_, console_,
                            data_->latents() ? DataKind::Latents : DataKind::Pixels);
  if (resumed && !resumed->run_id.empty()) cfg_.run.id = resumed->run_id;
  if (cfg_.run.id.empty()) cfg_.run.id = agreed_new_run_id(*ctx_.world);
}

void Run::print_header() {
  if (ctx_.world_rank != 0) return;
  const DiTConfig& model = setup_.model;
  const TrainConfig& tc = setup_.train;
  std::ostringstream os;
  os << "dit_mp train: " << setup_.layout.str() << ", " << be_->name() << " backend in "
     << dtype_name(be_->compute_dtype()) << " (communication: " << comms_ << "), model " << model.num_params()
     << " parameters (depth " << model.depth << ", hidden " << model.hidden_size << ", heads " << model.num_heads
     << ", patch " << model.patch_size << ", " << model.num_patches() << " tokens), data " << data_->describe()
     << "\nglobal batch " << tc.global_batch << " = dp " << setup_.layout.dp << " x micro " << tc.micro_batch
     << " x " << setup_.batch.microbatches << " microbatches"
     << (setup_.layout.dp > 1 ? ", ZeRO-" + std::to_string(tc.zero) + " over dp" : "") << ", " << tc.steps
     << " steps, pipeline schedule "
     << schedule_name(tc.schedule)
     << (tc.virtual_stages > 1 ? " interleaved over " + std::to_string(tc.virtual_stages) + " virtual stages" : "")
     << ", run folder " << cfg_.run.dir << "\nresolved config:\n" << cfg_.to_toml() << rank_map_;
  console_.line(os.str());
}

// One screen: a step, its log line, a stop on divergence, then what is due before the next step.
int Run::train() {
  ctx_.watch->phase = "training";  // start-up's allowance ends; each step sets its own phase
  ctx_.watch->factor = 1;
  t0_ = now_s();
  const std::int64_t steps = setup_.train.steps;
  StepStats last;
  std::int64_t steps_run = 0;
  profiler_->before_step(trainer_->next_step() + 1);
  const int rc = trainer_->train_to(steps, [&](std::int64_t done, const StepStats& st) {
    last = st;
    ++steps_run;
    monitor_->add_step(st);
    if (!st.spike.empty() && ctx_.world_rank == 0)
      console_.line(st.spike + (st.spike_skipped ? ": the update is skipped (train.skip_loss_spikes)" : ""));
    if (steps_run == 1 && !planned_.empty()) {  // the arenas reach their peak in the first step
      const std::string off = check_plan(ctx_, planned_, trainer_->memory());
      if (ctx_.world_rank == 0 && !off.empty()) console_.line(off);
    }
    log_step(done, st);
    if (const int rc = stop_for_divergence(done, st)) return rc;
    if (done == steps) return 0;
    const bool saved = due(cfg_.train.checkpoint_every, done, steps);
    if (saved) checkpoint();
    if (due(cfg_.train.sample_every, done, steps)) {
      char name[64];
      std::snprintf(name, sizeof name, "samples_step_%07lld.png", static_cast<long long>(done));
      sample_grid(name, done);
    }
    if (due(cfg_.train.eval_every, done, steps)) evaluate(done);
    write_profile([&] { return profiler_->after_step(done); });
    // A stop signal on any rank (preemption, time limit): all agree here, save, and exit.
    if (const int sig = agree_stop(*ctx_.world)) return stop_for_signal(sig, done, saved);
    profiler_->before_step(done + 1);
    return 0;
  });
  if (rc != 0) write_profile([&] { return profiler_->finish(); });
  return rc != 0 ? rc : finish(last, steps_run);
}

// A metrics row that cannot be written (a full disk) ends the run at this step on every rank, after
// a checkpoint, as a stop signal does: the run can be resumed once there is room.
void Run::write_metrics(const std::function<void()>& write) {
  try {
    agree(*ctx_.world, write);
  } catch (const AgreedError&) {
    checkpoint();
    throw;
  }
}

void Run::log_step(std::int64_t done, const StepStats& st) {
  const std::int64_t steps = setup_.train.steps;
  window_s_ += st.acct.step_s;
  ++window_steps_;
  // A step skipped for a non-finite loss, or for a non-finite gradient without loss scaling, is
  // never routine: always logged, with its count against train.max_nonfinite_steps.
  const bool loss_skip = st.nonfinite_rank >= 0;
  const bool unscaled_skip = st.skipped && !trainer_->loss_scaler().enabled();
  const bool log = done % cfg_.train.log_every == 0 || done == steps || loss_skip || st.nonfinite_at_scale_one ||
                   unscaled_skip;
  if ((loss_skip || unscaled_skip) && ctx_.world_rank == 0) {
    char what[96];
    if (loss_skip)
      std::snprintf(what, sizeof what, "the loss is %g (NaN or Inf from rank %d)", st.loss, st.nonfinite_rank);
    else
      std::snprintf(what, sizeof what, "the gradient norm is not finite (the loss is %g)", st.loss);
    char text[320];
    std::snprintf(text, sizeof text, "step %lld: %s: the update is skipped, %lld in a row of at most "
                  "train.max_nonfinite_steps = %d", static_cast<long long>(done), what,
                  static_cast<long long>(nonfinite_count(st)), cfg_.train.max_nonfinite_steps);
    console_.line(text);
  }
  if (!log) return;
  const double step_s = window_s_ / double(window_steps_);
  // The peak is per GPU on the CUDA backend and per machine on the CPU backend (ranks on one
  // machine share its cores).
  const double peak_tflops =
      cfg_.train.peak_tflops * (cfg_.train.backend == BackendKind::Cuda ? ctx_.world->size() : node_count());
  LogRow r;
  r.step = done;
  r.total = steps;
  r.loss = st.loss;
  r.mse = st.mse;
  r.second = st.second;
  r.second_name = cfg_.diffusion.objective == diffusion::Objective::Flow ? "cos" : "vb";
  if (!st.terms.empty()) r.terms.emplace_back("target", st.recipe);
  for (const LossTerm& t : st.terms) r.terms.emplace_back(t.name, t.value);
  r.grad_norm = st.grad_norm;
  r.lr = st.lr;
  r.images_per_s = double(setup_.train.global_batch) / step_s;
  // The student's forward and backward, and the teacher's forward when distilling.
  const double teacher_flops =
      setup_.train.distill.enabled() ? setup_.train.distill.teacher_model.forward_flops() : 0.0;
  r.tflops = (3.0 * setup_.model.forward_flops() + teacher_flops) * r.images_per_s / 1e12;
  r.mfu = r.tflops / peak_tflops;
  r.peak_mem_bytes = static_cast<std::uint64_t>(ctx_.world->all_reduce_max(double(peak_rss_bytes())));
  r.elapsed_s = now_s() - t0_;
  r.eta_s = step_s * double(steps - done);
  r.loss_scale = st.loss_scale;
  r.skipped_steps = trainer_->loss_scaler().state().skipped_steps;
  r.note = memory_headroom_note(ctx_, *be_, cfg_.parallel.memory_margin);
  write_metrics([&] {
    metrics_->write(r);
    if (tensorboard_) tensorboard_scalars(*tensorboard_, r);
  });
  if (ctx_.world_rank == 0) console_.step(r);
  std::vector<std::string> watched;  // the monitor's gather comes first on every rank, its files after
  write_metrics([&] { watched = monitor_->log(done, *be_, tensorboard_.get()); });
  for (const std::string& line : watched) console_.line(line);
  window_s_ = 0;
  window_steps_ = 0;
}

// The skipped steps in a row that count against train.max_nonfinite_steps: every skip without loss
// scaling; under fp16 loss scaling only those of a non-finite loss (an overflow of the gradients is
// the scaler's routine, and stops the run only at loss scale 1).
std::int64_t Run::nonfinite_count(const StepStats& st) const {
  return trainer_->loss_scaler().enabled() ? st.nonfinite_loss_in_row : st.nonfinite_in_row;
}

// One rule for a non-finite loss and a non-finite gradient norm: the step is skipped (the trainer),
// and the run stops when train.max_nonfinite_steps of them come in a row.
int Run::stop_for_divergence(std::int64_t done, const StepStats& st) const {
  const std::int64_t in_row = nonfinite_count(st);
  const bool streak = in_row >= cfg_.train.max_nonfinite_steps;
  if (!st.nonfinite_at_scale_one && !streak) return 0;
  if (ctx_.world_rank == 0) {
    const std::string where = "; metrics are in " + file("metrics.jsonl");
    const std::string limit = "train.max_nonfinite_steps = " + std::to_string(cfg_.train.max_nonfinite_steps);
    const std::string kept = "every one was skipped, the weights are those of step " +
                             std::to_string(done - st.nonfinite_in_row) +
                             " (try a lower train.lr, train.grad_clip or distill weights)";
    const std::string what =
        st.nonfinite_at_scale_one && !streak
            ? "the gradients are Inf or NaN at step " + std::to_string(done) +
                  " even at fp16 loss scale 1: the model diverged (try bf16, a lower train.lr or train.grad_clip)"
        : st.nonfinite_rank >= 0
            ? "the loss became NaN or Inf at step " + std::to_string(done) + " on rank " +
                  std::to_string(st.nonfinite_rank) + ": " + std::to_string(in_row) + " steps in a row " +
                  (trainer_->loss_scaler().enabled() ? "had a non-finite loss" : "were not finite") + " (" + limit +
                  "): " + kept
            : "the gradient norm was not finite at " + std::to_string(in_row) + " steps in a row (to step " +
                  std::to_string(done) + "; " + limit + "): " + kept;
    print_error((what + where).c_str());
  }
  return 1;
}

int Run::stop_for_signal(int sig, std::int64_t done, bool saved) {
  if (!saved) checkpoint();
  const int more = stop_signal_count() - 1;  // later signals (e.g. during the save) only count
  if (ctx_.world_rank == 0)
    console_.line("stopping after step " + std::to_string(done) + " of " + std::to_string(setup_.train.steps) +
                  ": received " + signal_name(sig) + " (preemption, time limit or scancel" +
                  (more > 0 ? "; " + std::to_string(more) + " more signal(s) on rank 0 ignored" : "") +
                  "); the checkpoint of step " + std::to_string(done) + " is saved; exit code " +
                  std::to_string(kExitPreempted) + ": run again with --resume auto to continue");
  return kExitPreempted;
}

int Run::finish(const StepStats& last, std::int64_t steps_run) {
  ctx_.watch->factor = CommWatch::kSlowPhaseFactor;  // the final save, weights and samples
  ctx_.watch->phase = "finishing";
  checkpoint();
  write_profile([&] { return profiler_->finish(); });  // a range that ends at the last step
  if (steps_run > 0)
    report_accounting(ctx_, last.acct, trainer_->memory(), file("accounting.json"), be_->attention_note(),
                      unplanned_device_bytes(*be_, trainer_->memory()));
  // Final weights (model and EMA) for `dit_mp sample`, then the final grid. They come from the
  // fp32 master weights and EMA, so a bf16/fp16 run saves them unrounded. One file at a time, the
  // whole model on world rank 0 only: another rank holds its stage's values of one kind and one
  // tensor of the model at a time.
  ZeroOptimizer& zero = trainer_->optimizer();
  zero.settle();
  const std::pair<const char*, Tensor> finals[] = {{"model.h5", zero.shard().master()}, {"ema.h5", zero.shard().ema()}};
  for (const auto& [name, shard] : finals) {
    const auto w = gather_global(trainer_->model(), ctx_, gather_shards(*be_, zero, shard, ctx_), 0);
    if (ctx_.world_rank == 0) save_weights(file(name), setup_.model, w, cfg_.diffusion.steps, cfg_.diffusion.objective);
  }
  const std::string samples = sample_grid("samples.png", trainer_->next_step());
  if (cfg_.train.eval_every > 0) evaluate(setup_.train.steps);
  if (ctx_.world_rank == 0) {
    console_.line("done in " + format_duration(now_s() - t0_) + "; samples: " + samples);
    const std::string plots = write_run_plots(cfg_.run.dir);
    if (!plots.empty()) console_.line(plots);
  }
  return 0;
}

void Run::record_tune(const std::string& json, const std::string& table) {
  collective_check([&] {
    if (ctx_.world_rank != 0) return;
    write_file_atomic(file("tune.json"), json, "the layout tuning's record");
    if (tensorboard_) tensorboard_->text("tune", trainer_->next_step() + 1, "```\n" + table + "```");
  });
}

void Run::write_profile(const std::function<std::string()>& write) {
  std::string written;
  write_metrics([&] { written = write(); });
  if (!written.empty()) console_.line(written);
}

void Run::checkpoint() {
  const auto span = trace::span_if_on("checkpoint", [] { return std::string("save"); });
  WatchPhase watch(ctx_.watch.get(), "checkpoint save", CommWatch::kSlowPhaseFactor);
  ctx_.watch->stop_grace = false;  // saving may take long; parallel.timeout_s still bounds each wait
  const double t = now_s();
  CheckpointMeta meta;
  meta.step = trainer_->next_step();
  meta.config_toml = cfg_.to_toml();
  meta.run_id = cfg_.run.id;
  meta.seed = cfg_.train.seed;
  const LossScaleState& ls = trainer_->loss_scaler().state();
  meta.loss_scale = ls.scale;
  meta.loss_scale_clean_steps = ls.clean_steps;
  meta.skipped_steps = ls.skipped_steps;
  meta.loss_scaling = ls.active;
  StageState owned;  // what the saved state does not borrow from the optimizer
  const std::string dir = save_checkpoint(checkpoint_root(), meta, setup_.model, trainer_->model().params(), ctx_,
                                          trainer_->checkpoint_view(owned), cfg_.train.keep_checkpoints);
  if (monitor_) monitor_->add_checkpoint(now_s() - t);
  if (ctx_.world_rank == 0) {
    char took[32];
    std::snprintf(took, sizeof took, "%.2f s", now_s() - t);
    console_.line("saved checkpoint " + dir + " in " + took);
  }
  ctx_.watch->stop_grace = true;
}

std::pair<std::vector<float>, std::vector<int>> Run::draw_ema(const std::vector<int>& classes, int per_class,
                                                              int num_steps, const std::string& what) {
  WatchPhase watch(ctx_.watch.get(), "sampling", CommWatch::kSlowPhaseFactor);
  auto ema = ema_stage(*be_, ctx_, *trainer_);
  SampleRequest req = sample_request(cfg_.sample, grid_labels(classes, setup_.model.num_classes, per_class),
                                     cfg_.diffusion.steps, data_->latents());
  req.num_steps = num_steps;
  Progress progress("sampling " + std::to_string(req.labels.size()) + " images: step", num_steps,
                    ctx_.world_rank == 0);
  req.after_step = [&] { progress.advance(); };
  auto samples = allocating("sampling " + std::to_string(req.labels.size()) + " images (" + what + ")",
                            [&] { return sample_images(*be_, ctx_, *ema, req); });
  return {std::move(samples), req.labels};
}

std::string Run::sample_grid(const std::string& name, std::int64_t step) {
  const auto [samples, labels] =
      draw_ema(cfg_.sample.classes, cfg_.sample.per_class, cfg_.sample.num_steps, "sample.per_class");
  std::string wrote;
  if (!vae_) {
    wrote = write_sample_outputs(setup_.model, samples, labels, cfg_.sample.per_class, file(name));
  } else {
    const std::int64_t side = setup_.model.input_size, n = static_cast<std::int64_t>(labels.size());
    WatchPhase watch(ctx_.watch.get(), "decoding", CommWatch::kSlowPhaseFactor);
    const std::vector<float> images =  // every rank decodes its share (host messages); rank 0 writes
        decode_on_ranks(*watched_world(ctx_.watch), *vae_, cfg_.train.backend == BackendKind::Cuda ? "cuda" : "cpu",
                        samples, n, side, side);
    collective_check([&] {
      if (ctx_.world_rank != 0) return;
      wrote = write_decoded_outputs(setup_.model, samples, images, vae_->config.out_channels,
                                    static_cast<int>(side * vae_->config.downsampling()), labels,
                                    cfg_.sample.per_class, file(name));
    });
  }
  if (ctx_.world_rank == 0) console_.line("wrote " + wrote);
  write_metrics([&] {  // every rank agrees (only rank 0 writes); a latent run without a VAE has no grid
    if (tensorboard_ && std::filesystem::exists(file(name))) tensorboard_grid(*tensorboard_, "samples", step, file(name));
  });
  return wrote;
}

// Cheap settings ([eval]): every class; rank 0 judges the samples. The classifier and the
// reference set are made ready the first time (training the classifier once takes minutes; the
// other ranks wait in the agreed check, where no watchdog runs).
void Run::evaluate(std::int64_t step) {
  // (Named pieces, not a structured binding: clang 14 cannot capture one in the lambda below.)
  auto drawn = draw_ema({}, cfg_.eval.per_class, cfg_.eval.num_steps, "eval.per_class");
  std::vector<float>& samples = drawn.first;
  std::vector<int>& labels = drawn.second;
  collective_check([&] {
    if (judge_ || world_rank() != 0) return;
    prepare_evaluation(eval_paths(cfg_), cfg_.data.prepare);
    judge_ = std::make_unique<QualityJudge>(eval_paths(cfg_));
  });
  std::string line;
  write_metrics([&] {  // rank 0 judges and writes the row; a failure ends the run on every rank
    if (ctx_.world_rank != 0) return;
    const DiTConfig& model = setup_.model;
    eval::ImageSet set;
    set.n = std::int64_t(labels.size());
    set.c = model.in_channels, set.h = model.input_size, set.w = model.input_size;
    set.pixels = std::move(samples);
    set.labels = std::move(labels);
    const QualityReport r = judge_->judge(set);
    metrics_->write_eval(step, quality_json(r));
    if (tensorboard_) {
      tensorboard_->scalar("eval/fid", step, r.samples.fid);
      tensorboard_->scalar("eval/fid_real_floor", step, r.floor.fid);
      tensorboard_->scalar("eval/precision", step, r.samples.precision);
      tensorboard_->scalar("eval/recall", step, r.samples.recall);
      tensorboard_->scalar("eval/class_accuracy", step, r.samples.class_accuracy);
    }
    char text[256];
    std::snprintf(text, sizeof text,
                  "eval step %lld: FID %.2f (real-data floor %.2f), precision %.3f, recall %.3f, class accuracy "
                  "%.1f%% (real %.1f%%), %lld samples",
                  static_cast<long long>(step), r.samples.fid, r.floor.fid, r.samples.precision, r.samples.recall,
                  100 * r.samples.class_accuracy, 100 * r.floor.class_accuracy, static_cast<long long>(r.samples.n));
    line = text;
  });
  if (ctx_.world_rank == 0) console_.line(line);
}

}  // namespace dit
