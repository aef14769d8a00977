// The run configuration: typed sections with defaults, read from TOML (toml11), overridden by
// command-line flags and `--set section.key=value`, validated with messages that name the key and
// the allowed values, and written back as TOML (the resolved config saved in the run folder).
// Enum-like settings are enums here, parsed once where the config is read; their names come from
// the enum's own table (kScheduleNames, kRecomputeNames, ...).
// With no file, the defaults are the Fashion-MNIST demo (configs/fashion_mnist.toml).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend_kind.h"
#include "core/dtype.h"
#include "diffusion/objective.h"
#include "layers/dit_block.h"
#include "layers/dit_config.h"
#include "optim/adamw.h"
#include "parallel/pipeline_schedule.h"

namespace dit {

struct ModelSection {
  std::string preset;  // "DiT-XL/2" etc.; empty = the explicit sizes below
  DiTConfig dit;       // explicit sizes (a preset overwrites depth/hidden/heads/patch)
  bool operator==(const ModelSection&) const;  // field by field (DiTConfig has no ==)
};

struct DiffusionSection {
  int steps = 1000;  // training timesteps (linear betas); learn_sigma lives in [model]
  diffusion::Objective objective = diffusion::Objective::Ddpm;  // ddpm | flow (SiT's linear path, velocity)
  diffusion::TimestepSampling timestep_sampling = diffusion::TimestepSampling::Uniform;  // uniform | logit_normal
  double logit_normal_mean = 0.0, logit_normal_std = 1.0;  // t = sigmoid(mean + std u), u ~ N(0, 1)
  bool cosine_loss = false;  // flow: + LightningDiT's 1 - cos(v_pred, v_target)
  diffusion::LossWeight loss_weight = diffusion::LossWeight::None;  // none | min_snr (ddpm)
  double min_snr_gamma = 5.0;  // min(SNR, gamma) / SNR
  diffusion::TrainObjective train_objective() const;
  bool operator==(const DiffusionSection&) const = default;
};

// train.profile (--profile A:B): the first and last step recorded, counting from 1.
struct ProfileSteps {
  std::int64_t first = 0, last = -1;  // none when last < first
  bool contains(std::int64_t step) const { return step >= first && step <= last; }
};
// Throws one line naming train.profile unless `text` is "A:B" with 1 <= A <= B.
ProfileSteps parse_profile_steps(const std::string& text);

struct TrainSection {
  std::int64_t global_batch = 128;
  int micro_batch = 16;
  std::int64_t steps = 1000;
  double lr = 1e-3;
  std::int64_t warmup = 0;
  LrSchedule lr_schedule = LrSchedule::Constant;  // constant | cosine
  double min_lr = 0.0;
  double weight_decay = 0.0;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double grad_clip = 1.0;  // 0 = off
  double ema_decay = 0.9999;
  bool ema_warmup = true;
  std::uint64_t seed = 0;
  int log_every = 10;
  int sample_every = 0;  // 0 = only at the end
  int eval_every = 0;    // sample quality ([eval]) every N steps and at the end; 0 = never
  int checkpoint_every = 0;  // steps between checkpoints; 0 = only at the end
  int keep_checkpoints = 3;  // newest complete checkpoints kept; 0 = all
  double peak_tflops = 0.215;  // for MFU: per machine (cpu) or per GPU (cuda); default: a 2-core Zen 4 machine's fp32 ceiling
  DType precision = DType::F32;    // fp32 | bf16 | fp16: storage of params, activations, grads
  BackendKind backend = BackendKind::Cpu;  // cpu | cuda
  double loss_scale = 65536;       // fp16: the initial dynamic loss scale
  int loss_scale_window = 1000;    // fp16: clean steps after which the scale doubles
  // fp32/bf16: steps in a row whose gradient norm is not finite (each skipped, not applied) before
  // the run stops as diverged; fp16 skips overflows and stops when they persist at loss scale 1.
  int max_nonfinite_steps = 3;
  Recompute recompute = Recompute::None;  // none | selective | full: activation recomputation
  int recompute_blocks = 0;        // full: only the first K blocks of each stage; 0 = all
  DType grad_reduce = DType::F32;  // fp32 | bf16: dtype of the dp gradient reduction
  bool deterministic = false;      // GPU: only kernels whose results do not vary run to run
  bool tensorboard = true;         // TensorBoard event files in <run.dir>/tb (run/tensorboard.h)
  std::string profile;             // "A:B": a timeline of steps A to B in <run.dir>/trace.json (run/profile.h); "" = off
  double straggler_margin = 0.25;  // name a rank whose own work stays this share above the median's; 0 = off
  double loss_spike_z = 6;         // log a loss this many standard deviations above the recent ones; 0 = off
  bool skip_loss_spikes = false;   // and skip its update, as a non-finite loss's (engine/loss_spike.h)
  bool operator==(const TrainSection&) const = default;
};

// How the optimizer's state, the gradients and the parameters are sharded over data parallelism
// (optim/zero.h).
struct OptimSection {
  int zero = 1;             // 1: optimizer state; 2: and gradients; 3: and parameters (fully sharded)
  double bucket_mib = 25;   // consecutive units reduced (and gathered) together up to this, the largest message, in MiB
  bool overlap = true;      // reduce each unit's gradients during the backward; zero 3: fetch the next unit's parameters ahead
  std::string offload = "none";  // none | cpu: the optimizer state in host memory, AdamW on the host
  bool operator==(const OptimSection&) const = default;
};

// How a run's layout is set: by the keys as given (tp, pp, micro_batch, recompute, ...), or chosen by
// the planner's layout search (plan/auto_layout.h) for the job's world size and memory per rank.
// "tune": the search's parallel.tune_candidates fastest layouts are each trained for
// parallel.tune_steps steps inside the job, and the run trains on the fastest measured (run/layout_tune.h).
enum class LayoutMode : std::uint8_t { Fixed, Auto, Tune };
inline constexpr Named<LayoutMode> kLayoutModeNames[] = {
    {LayoutMode::Fixed, "fixed"}, {LayoutMode::Auto, "auto"}, {LayoutMode::Tune, "tune"}};

struct ParallelSection {
  // "auto": the search picks tp, pp, virtual_stages, schedule, sequence_parallel, train.micro_batch
  // and train.recompute; only keys set on the command line (--tp 2, --set) constrain it.
  LayoutMode layout = LayoutMode::Fixed;
  std::string hardware;    // a name of the planner's table (links, FLOP/s, memory); "" = by backend
  double memory_gib = 0;   // memory per rank for the search; 0 = hardware's, or the device's / machine's
  // Share of the memory kept free: the search plans within the rest, and a log line warns when
  // free memory (the device's, or the cgroup's / machine's on the CPU) falls under it.
  double memory_margin = 0.10;
  int tune_candidates = 3;  // layout = "tune": the search's fastest layouts measured
  int tune_steps = 4;       // layout = "tune": steps each is trained for (the first is not timed)
  int tp = 1, pp = 1;
  ScheduleKind schedule = ScheduleKind::OneFOneB;  // 1f1b | gpipe
  std::vector<int> pp_layers;     // blocks per stage (per model chunk with virtual stages); empty = balanced
  bool sequence_parallel = false; // Megatron sequence parallelism (needs tp > 1)
  // Watchdog: the longest one communication call may wait for its peers before the job is
  // aborted naming the operation and peer (x10 at start-up, in the first step, checkpoints and
  // sampling; see parallel/watchdog.h). 0 = wait forever.
  double timeout_s = 600;
  int virtual_stages = 1;         // model chunks per pipeline rank: > 1 = interleaved 1F1B
  bool operator==(const ParallelSection&) const = default;
};

struct DataSection {
  std::string path = "data/fashion_mnist.h5";  // HDF5 dataset (see io/h5_dataset.h)
  std::string prepare = "fashion-mnist";        // what to prepare when `path` is missing: fashion-mnist | none
  double latent_scale = 0.18215;                // used when the file holds latents
  // A latent dataset's VAE (safetensors) and its config.json ("": beside it): the sample grids of
  // the run, and `dit_mp sample --run`, show the decoded pictures.
  std::string vae, vae_config;
  bool operator==(const DataSection&) const = default;
};

// Whether the DDPM/DDIM samplers clamp each step's predicted x0 to [-1, 1] (sample.clip_denoised):
// auto is yes for pixels, whose range that is, and no for VAE latents, which the official DiT samples
// with clip_denoised=False (a latent's scaled values reach past 1). A run resolves auto from its data
// when it starts and records the answer in its config.toml. Flow samplers never clip.
enum class ClipSetting : std::uint8_t { Auto, Yes, No };
inline constexpr Named<ClipSetting> kClipSettingNames[] = {
    {ClipSetting::Auto, "auto"}, {ClipSetting::Yes, "true"}, {ClipSetting::No, "false"}};

struct SampleSection {
  int num_steps = 50;          // sampler steps
  diffusion::SamplerKind sampler = diffusion::SamplerKind::Ddim;  // ddim | ddpm (ddpm); euler | heun | euler_maruyama (flow)
  double last_step_size = 0.04;  // euler_maruyama: the final "Mean" step's size (SiT's default)
  double cfg_scale = 4.0;
  int per_class = 8;           // images per class row of the grid
  std::vector<int> classes;    // empty = every class
  bool cfg_official = false;   // guide only the first 3 channels, as the official sampler
  // Guidance only at noise levels t / diffusion.steps in [cfg_t_min, cfg_t_max] (engine/sampler.h).
  double cfg_t_min = 0.0, cfg_t_max = 1.0;
  std::uint64_t seed = 0;
  ClipSetting clip_denoised = ClipSetting::Auto;
  bool operator==(const SampleSection&) const = default;
};

// Sample quality during training (train.eval_every) and the defaults of `dit_mp evaluate`: a
// classifier's feature space and predictions against a labelled reference set (see eval/quality.h).
struct EvalSection {
  std::string classifier;  // "" = <data.path without .h5>_classifier.h5, trained when missing
  std::string reference;   // "" = <data.path without .h5>_test.h5 (Fashion-MNIST's test split is prepared)
  int per_class = 20;      // samples per class (cheap: the final numbers come from dit_mp evaluate)
  int num_steps = 25;      // sampler steps (sample.sampler, sample.cfg_scale)
  bool operator==(const EvalSection&) const = default;
};

// Knowledge distillation from a teacher (engine/distill.h): the loss is output_weight x KD to the
// teacher's prediction + target_weight x the recipe's loss + feature_weight x the masked feature
// loss of the pairs student_layers[k] <-> teacher_layers[k].
enum class FeatureDecay : std::uint8_t { Linear, None };
inline constexpr Named<FeatureDecay> kFeatureDecayNames[] = {{FeatureDecay::Linear, "linear"},
                                                             {FeatureDecay::None, "none"}};
struct DistillSection {
  std::string teacher;  // the teacher's weights file; "" = no distillation
  double output_weight = 0.9;   // KD to the teacher's output (and its variance)
  double target_weight = 0.1;   // the recipe's own loss against the data
  double feature_weight = 0.01; // the masked feature loss (beta); 0 = output KD only
  FeatureDecay feature_decay = FeatureDecay::Linear;  // linear: to 0 at the last step
  std::vector<int> student_layers, teacher_layers;    // the feature pairs; empty = the defaults
  double mask_sigma = 2.0;      // zero values farther than this many std from the mean; 0 = no mask
  // The teacher file's CRC-32 (8 hex digits, its seal's), recorded in the run's config.toml when it
  // starts; given (or recorded by the checkpoint a run resumes), another file is refused.
  std::string teacher_crc32;
  bool operator==(const DistillSection&) const = default;
};

struct RunSection {
  std::string dir = "runs/fashion_mnist";
  bool overwrite = false;
  std::string checkpoint_dir;  // "" = <dir>/ckpt
  std::string resume;          // "" = a fresh run; "auto" = the newest checkpoint if any; or a path
  std::string init_from;       // start from these weights (a checkpoint or a weights file)
  // The run's identity (32 hex digits, 128 random bits), recorded like distill.teacher_crc32: made
  // when a fresh run starts (a value given is replaced), kept by its resumes, written to config.toml
  // and to every checkpoint; checkpoints of another run are refused (run/run_identity.h).
  std::string id;
  bool operator==(const RunSection&) const = default;
};

struct RunConfig {
  ModelSection model;
  DiffusionSection diffusion;
  TrainSection train;
  OptimSection optim;
  ParallelSection parallel;
  DataSection data;
  SampleSection sample;
  EvalSection eval;
  DistillSection distill;
  RunSection run;

  // The Fashion-MNIST demo: a small DiT on 32x32 padded garments, 10 classes.
  static RunConfig demo();
  // Parses TOML text; `origin` names the source in messages. Unknown keys, wrong types and
  // out-of-range values throw naming the key.
  static RunConfig from_toml(const std::string& text, const std::string& origin);
  static RunConfig from_file(const std::string& path);
  // Applies "section.key=value" (the value in TOML syntax, or a bare string). Does not validate:
  // call validate() once every override is in.
  void set(const std::string& assignment);
  // The same for an assignment a command-line flag stands for: `origin` ("--steps 5") names it in
  // messages.
  void set(const std::string& assignment, const std::string& origin);
  // Under parallel.layout = "auto" the layout's keys (tp, pp, virtual_stages, pp_layers,
  // sequence_parallel) are the search's to set and validate() leaves them; validate_layout() checks
  // them too, as for a fixed layout (the search's choice).
  void validate() const;
  void validate_layout() const;
  // The [sample] rules of validate() alone, against model.dit's classes and diffusion.steps: what
  // `sample` and `evaluate` check once their flags are in (their messages name both the key and
  // the flag).
  void validate_sample() const;
  std::string to_toml() const;
  // "train.precision = bf16" style names of the enum settings, for messages and for calls that
  // take a backend by name.
  std::string precision_str() const { return name_of(kPrecisionNames, train.precision); }
  std::string backend_str() const { return name_of(kBackendNames, train.backend); }
  bool operator==(const RunConfig&) const = default;
};

// The model's sizes checked with messages naming `prefix` + each key ("model." for a run config,
// "" for a file's /config): ranges first, then what the sizes must divide.
void validate_model_sizes(const DiTConfig& m, const std::string& prefix);

}  // namespace dit
