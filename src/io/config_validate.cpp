// Validation of the run configuration: every range, allowed value and cross-key rule, each
// failure one message naming the key, the value and what would fit (see config.h).
#include <cmath>
#include <limits>
#include <sstream>

#include "core/error.h"
#include "core/quote.h"
#include "diffusion/noise_schedule.h"
#include "io/config.h"
#include "io/config_fields.h"

namespace dit {

using namespace config_fields;

namespace {

constexpr double kMaxLogitNormal = 10.0;
constexpr double kMaxDistillWeight = 1000.0;

template <class T>
std::string show(const T& v) {
  std::ostringstream os;
  os << v;
  return os.str();
}
std::string show(const std::string& v) { return quote_string(v); }
std::string show(bool v) { return v ? "true" : "false"; }

// Fails with "key = value: expected <what>" unless `ok`.
}  // namespace

ProfileSteps parse_profile_steps(const std::string& text) {
  ProfileSteps p;
  const std::size_t colon = text.find(':');
  bool ok = colon != std::string::npos && colon > 0 && colon + 1 < text.size() &&
            text.find_first_not_of("0123456789:") == std::string::npos && text.find(':', colon + 1) == std::string::npos &&
            colon <= 12 && text.size() - colon - 1 <= 12;
  if (ok) {
    p.first = std::stoll(text.substr(0, colon));
    p.last = std::stoll(text.substr(colon + 1));
    ok = p.first >= 1 && p.last >= p.first;
  }
  DIT_CHECK(ok, "train.profile = ", quote_string(text),
            " (--profile): expected the steps to record as A:B, whole numbers with 1 <= A <= B (e.g. 5:8)");
  return p;
}

namespace {

template <class T>
void require(bool ok, const std::string& key, const T& value, const std::string& what) {
  if (!ok) DIT_FAIL(key, " = ", show(value), ": expected ", what);
}

void require_one_of(const std::string& key, const std::string& value,
                    const std::vector<std::string>& allowed) {
  require(std::find(allowed.begin(), allowed.end(), value) != allowed.end(), key, value,
          "one of " + join(allowed));
}

// Checks that hold for every field of a type: floats are finite, seeds fit a TOML integer.
void validate_representable(RunConfig copy) {
  for (const Section& sec : sections(copy))
    for (const Field& f : sec.fields) {
      const std::string key = std::string(sec.name) + "." + f.key;
      if (auto* d = std::get_if<double*>(&f.ref))
        require(std::isfinite(**d), key, **d, "a finite number");
      if (auto* u = std::get_if<std::uint64_t*>(&f.ref))
        require(**u <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()), key,
                **u, "an integer in [0, 2^63 - 1] (TOML integers are signed 64-bit)");
    }
}

}  // namespace

// The model's sizes, each named as p + its key (p = "model." in a run config, "" in a file's
// /config): every size is range-checked before any product of sizes is formed, so no message shows
// an overflowed value. The bounds are far past the official DiT-XL/2 (1152 wide, 28 deep).
void validate_model_sizes(const DiTConfig& m, const std::string& p) {
  auto in_range = [&p](const char* field, auto v, auto most, const std::string& what = "") {
    DIT_CHECK(v > 0, p, field, " = ", v, ": expected a positive value");
    DIT_CHECK(v <= most, p, field, " = ", v, ": expected at most ", what.empty() ? "" : p + what + " = ",
              most);
  };
  in_range("input_size", m.input_size, kMaxModelSide);
  in_range("patch_size", m.patch_size, m.input_size, "input_size");
  in_range("in_channels", m.in_channels, 4096);
  in_range("hidden_size", m.hidden_size, 65536);
  in_range("depth", m.depth, 4096);
  in_range("num_heads", m.num_heads, m.hidden_size, "hidden_size");
  in_range("mlp_ratio", m.mlp_ratio, 64.0);
  in_range("num_classes", m.num_classes, 1 << 24);
  in_range("frequency_embedding_size", m.frequency_embedding_size, 65536);
  in_range("layernorm_eps", m.layernorm_eps, 1.0);
  DIT_CHECK(m.input_size % m.patch_size == 0, p, "input_size = ", m.input_size,
            " is not divisible by ", p, "patch_size = ", m.patch_size);
  DIT_CHECK(m.hidden_size % m.num_heads == 0, p, "hidden_size = ", m.hidden_size,
            " is not divisible by ", p, "num_heads = ", m.num_heads);
  DIT_CHECK(m.hidden_size % 4 == 0, p, "hidden_size = ", m.hidden_size,
            " must be divisible by 4 (2-D sin-cos positional embedding)");
  DIT_CHECK(m.mlp_hidden() > 0, p, "mlp_ratio = ", m.mlp_ratio, " gives an empty MLP");
  DIT_CHECK(m.ffn_hidden() > 0, p, "mlp = \"swiglu\" with ", p, "mlp_ratio = ", m.mlp_ratio,
            " gives an empty SwiGLU hidden layer (int(2/3 * ", m.mlp_hidden(), ") = 0)");
  DIT_CHECK(m.pos_embed != PosEmbed::Rope || m.head_dim() % 4 == 0,
            p, "pos_embed = \"rope\" needs a head dim (", p, "hidden_size / ", p, "num_heads = ", m.head_dim(),
            ") divisible by 4: the 2-D rotary embedding rotates pairs of the head's two halves (rows, columns of the ",
            m.grid(), " x ", m.grid(), " token grid)");
  DIT_CHECK(m.class_dropout_prob >= 0 && m.class_dropout_prob < 1, p, "class_dropout_prob = ",
            m.class_dropout_prob, ": expected a value in [0, 1)");
}

namespace {

void validate_model(const ModelSection& m) {
  if (!m.preset.empty()) {
    try {
      dit_preset(m.preset);
    } catch (const Error&) {
      require(false, "model.preset", m.preset,
              "one of " + join(dit_preset_names()) + " (or \"\" for the explicit sizes)");
    }
  }
  validate_model_sizes(m.dit, "model.");
  m.dit.validate();  // the model's own invariants: none left to fail once the keys above hold
}

void validate_train(const TrainSection& t) {
  require(t.global_batch >= 1, "train.global_batch", t.global_batch, "an integer >= 1");
  require(t.micro_batch >= 1, "train.micro_batch", t.micro_batch, "an integer >= 1");
  require(t.micro_batch <= t.global_batch, "train.micro_batch", t.micro_batch,
          "a value <= train.global_batch = " + show(t.global_batch));
  require(t.steps >= 1, "train.steps", t.steps, "an integer >= 1");
  require(t.lr > 0, "train.lr", t.lr, "a value > 0");
  require(t.warmup >= 0, "train.warmup", t.warmup, "an integer >= 0 (0 = no warmup)");
  require(t.min_lr >= 0 && t.min_lr <= t.lr, "train.min_lr", t.min_lr,
          "a value in [0, train.lr = " + show(t.lr) + "]");
  require(t.weight_decay >= 0, "train.weight_decay", t.weight_decay, "a value >= 0");
  require(t.beta1 >= 0 && t.beta1 < 1, "train.beta1", t.beta1, "a value in [0, 1)");
  require(t.beta2 >= 0 && t.beta2 < 1, "train.beta2", t.beta2, "a value in [0, 1)");
  require(t.eps > 0, "train.eps", t.eps, "a value > 0");
  require(t.grad_clip >= 0, "train.grad_clip", t.grad_clip, "a value >= 0 (0 = no clipping)");
  require(t.ema_decay >= 0 && t.ema_decay < 1, "train.ema_decay", t.ema_decay,
          "a value in [0, 1)");
  require(t.log_every >= 1, "train.log_every", t.log_every, "an integer >= 1");
  require(t.sample_every >= 0, "train.sample_every", t.sample_every,
          "an integer >= 0 (0 = only at the end)");
  require(t.eval_every >= 0, "train.eval_every", t.eval_every,
          "an integer >= 0 (0 = never; N = every N steps and at the end)");
  require(t.peak_tflops > 0, "train.peak_tflops", t.peak_tflops, "a value > 0");
  require(t.checkpoint_every >= 0, "train.checkpoint_every", t.checkpoint_every,
          "an integer >= 0 (0 = only at the end)");
  require(t.keep_checkpoints >= 0, "train.keep_checkpoints", t.keep_checkpoints,
          "an integer >= 0 (0 = keep all)");
  require(std::isfinite(t.loss_scale) && t.loss_scale >= 1, "train.loss_scale", t.loss_scale,
          "a number >= 1 (the initial fp16 loss scale)");
  require(t.loss_scale_window >= 1, "train.loss_scale_window", t.loss_scale_window, "an integer >= 1");
  require(t.max_nonfinite_steps >= 1 && t.max_nonfinite_steps <= 1000000, "train.max_nonfinite_steps",
          t.max_nonfinite_steps, "an integer in [1, 1000000] (skipped steps in a row before the run stops)");
  require(std::isfinite(t.straggler_margin) && t.straggler_margin >= 0 && t.straggler_margin <= 100,
          "train.straggler_margin", t.straggler_margin, "a number in [0, 100] (0: no straggler watch)");
  require(std::isfinite(t.loss_spike_z) && t.loss_spike_z >= 0 && t.loss_spike_z <= 1e6, "train.loss_spike_z",
          t.loss_spike_z, "a number in [0, 1e6] (0: no loss spike watch)");
  require(!t.skip_loss_spikes || t.loss_spike_z > 0, "train.skip_loss_spikes", t.skip_loss_spikes,
          "false while train.loss_spike_z = 0 (no spike is found to skip)");
  if (!t.profile.empty()) {
    const ProfileSteps p = parse_profile_steps(t.profile);  // throws naming the key
    require(p.last <= t.steps, "train.profile", t.profile,
            "steps A:B with B at most train.steps = " + std::to_string(t.steps));
  }
  require(t.grad_reduce == DType::F32 || t.precision != DType::F32, "train.grad_reduce",
          std::string(name_of(kGradReduceNames, t.grad_reduce)),
          "\"fp32\" when train.precision = \"fp32\" (a bf16 reduction is for 16-bit runs)");
  require(t.recompute_blocks >= 0, "train.recompute_blocks", t.recompute_blocks,
          "an integer >= 0 (0 = every block of each stage)");
  require(t.recompute_blocks == 0 || t.recompute == Recompute::Full, "train.recompute_blocks", t.recompute_blocks,
          "0 unless train.recompute = \"full\" (it is " + quote_string(recompute_name(t.recompute)) + ")");
}

// The keys of the layout search and the watchdog: read under either parallel.layout.
void validate_parallel_common(const ParallelSection& p) {
  require(p.memory_gib >= 0, "parallel.memory_gib", p.memory_gib,
          "GiB per rank > 0 (or 0: the hardware's, the device's free or the machine's memory)");
  require(p.memory_margin >= 0 && p.memory_margin < 1, "parallel.memory_margin", p.memory_margin,
          "a share of the memory kept free in [0, 1)");
  require(p.timeout_s >= 0 && std::isfinite(p.timeout_s), "parallel.timeout_s", p.timeout_s,
          "seconds >= 0 (0: no watchdog)");
  require(p.tune_candidates >= 1 && p.tune_candidates <= 64, "parallel.tune_candidates", p.tune_candidates,
          "an integer in [1, 64] (layouts measured by --layout tune)");
  require(p.tune_steps >= 2 && p.tune_steps <= 1000, "parallel.tune_steps", p.tune_steps,
          "an integer in [2, 1000] (steps each layout trains for under --layout tune; the first is not timed)");
}

// The zero-bubble schedules' layouts: both need a pipeline; ZB-V two chunks per rank and depth a
// multiple of 2 x pp (each message names parallel.schedule and what fits).
void validate_zero_bubble(const ParallelSection& p, const DiTConfig& m) {
  if (!is_zero_bubble(p.schedule)) return;
  const std::string name = schedule_name(p.schedule);
  require(p.pp >= 2, "parallel.schedule", name,
          "\"1f1b\" or \"gpipe\" when parallel.pp = " + show(p.pp) + " (zero-bubble schedules need parallel.pp >= 2)");
  if (p.schedule == ScheduleKind::ZbH1) {
    require(p.virtual_stages == 1, "parallel.schedule", name,
            "\"zb-v\" or \"1f1b\" with parallel.virtual_stages = " + show(p.virtual_stages) +
                " (ZB-H1 runs one chunk per rank)");
    return;
  }
  require(p.virtual_stages == 2, "parallel.schedule", name,
          "parallel.virtual_stages = 2 with it, not " + show(p.virtual_stages) +
              " (ZB-V runs two model chunks per rank in a V)");
  require(m.depth % (2 * p.pp) == 0, "parallel.schedule", name,
          "model.depth = " + show(m.depth) + " to be a multiple of 2 x parallel.pp = " + show(2 * p.pp) +
              " (ZB-V splits the blocks evenly into 2 x pp chunks)");
}

// The layout's own keys: under parallel.layout = "auto" the search sets them (and checks its
// choice here, RunConfig::validate_layout).
void validate_parallel(const ParallelSection& p, const DiTConfig& m) {
  require(p.tp >= 1, "parallel.tp", p.tp, "an integer >= 1");
  require(p.pp >= 1, "parallel.pp", p.pp, "an integer >= 1");
  require(!p.sequence_parallel || p.tp > 1, "parallel.sequence_parallel", p.sequence_parallel,
          "false when parallel.tp = 1 (sequence parallelism splits tokens over the tp ranks)");
  require(!p.sequence_parallel || m.num_patches() % p.tp == 0, "parallel.tp", p.tp,
          "a divisor of the " + show(m.num_patches()) +
              " tokens per image with parallel.sequence_parallel (each tp rank keeps an equal share)");
  // Tensor parallelism splits whole heads and the MLP width (layers/params.h declares each split).
  require(m.num_heads % p.tp == 0, "parallel.tp", p.tp,
          "a divisor of model.num_heads = " + show(m.num_heads));
  require(m.mlp_hidden() % p.tp == 0, "parallel.tp", p.tp,
          "a divisor of the MLP width " + show(m.mlp_hidden()) + " (model.hidden_size x mlp_ratio)");
  require(m.ffn_hidden() % p.tp == 0, "parallel.tp", p.tp,
          "a divisor of model.mlp = \"swiglu\"'s hidden width " + show(m.ffn_hidden()) +
              " (int(2/3 x the MLP width " + show(m.mlp_hidden()) + "))");
  require(p.virtual_stages >= 1, "parallel.virtual_stages", p.virtual_stages,
          "an integer >= 1 (model chunks per pipeline rank)");
  validate_zero_bubble(p, m);
  if (p.virtual_stages > 1 && p.schedule != ScheduleKind::ZbV) {
    require(p.pp >= 2, "parallel.virtual_stages", p.virtual_stages,
            "1 when parallel.pp = " + show(p.pp) + " (virtual stages interleave chunks over pipeline ranks)");
    require(p.schedule == ScheduleKind::OneFOneB, "parallel.virtual_stages", p.virtual_stages,
            "1 with parallel.schedule = \"" + schedule_name(p.schedule) + "\" (interleaving is a 1F1B schedule)");
    require(p.pp * p.virtual_stages <= m.depth, "parallel.virtual_stages", p.virtual_stages,
            "at most model.depth / parallel.pp = " + show(m.depth) + " / " + show(p.pp) +
                " (each of the pp x virtual_stages model chunks needs a block)");
  }
  const int chunks = p.pp * p.virtual_stages;
  if (p.pp_layers.empty()) {
    require(p.pp <= m.depth, "parallel.pp", p.pp,
            "at most model.depth = " + show(m.depth) + " stages (each needs a block)");
    return;
  }
  std::int64_t sum = 0;  // entries are ints; their sum may not be
  for (std::size_t i = 0; i < p.pp_layers.size(); ++i) {
    require(p.pp_layers[i] >= 1, "parallel.pp_layers[" + show(i) + "]", p.pp_layers[i],
            "an integer >= 1 (every stage needs a block)");
    sum += p.pp_layers[i];
  }
  const std::string layers = int_list(p.pp_layers);
  if (static_cast<int>(p.pp_layers.size()) != chunks)
    DIT_FAIL("parallel.pp_layers = ", layers, ": expected one entry per ",
             p.virtual_stages > 1 ? "model chunk (parallel.pp x parallel.virtual_stages = " + show(chunks)
                                  : "stage (parallel.pp = " + show(p.pp),
             "), got ", p.pp_layers.size());
  if (sum != m.depth)
    DIT_FAIL("parallel.pp_layers = ", layers, ": expected blocks summing to model.depth = ",
             m.depth, ", got ", sum);
}

// The recipe's keys: flow trains no variance, weighting and the cosine term belong to one
// objective each, the logit-normal parameters are a distribution's.
void validate_diffusion(const DiffusionSection& d, const DiTConfig& m) {
  using namespace diffusion;
  require(d.steps >= 1 && d.steps <= kMaxDiffusionSteps, "diffusion.steps", d.steps,
          "an integer in [1, " + show(kMaxDiffusionSteps) + "]");
  const bool flow = d.objective == Objective::Flow;
  if (flow && m.learn_sigma)
    DIT_FAIL("model.learn_sigma = true: expected false with diffusion.objective = \"flow\" (a velocity model "
             "learns no variance; its output has in_channels channels)");
  // Beyond |mean| or std of 10, sigmoid(mean + std u) sits within 5e-5 of 0 or 1 for nearly every u.
  require(std::abs(d.logit_normal_mean) <= kMaxLogitNormal, "diffusion.logit_normal_mean", d.logit_normal_mean,
          "a mean in [-10, 10] (t = sigmoid(mean + std u); 0 is SD3's and LightningDiT's)");
  require(d.logit_normal_std > 0 && d.logit_normal_std <= kMaxLogitNormal, "diffusion.logit_normal_std",
          d.logit_normal_std, "a standard deviation > 0 and at most 10 (t = sigmoid(mean + std u))");
  if (flow && d.loss_weight != LossWeight::None)
    DIT_FAIL("diffusion.loss_weight = \"", name_of(kLossWeightNames, d.loss_weight),
             "\": expected \"none\" with diffusion.objective = \"flow\" (Min-SNR weights epsilon prediction; "
             "the velocity loss of SiT is unweighted)");
  if (!flow && d.timestep_sampling == TimestepSampling::LogitNormal)
    DIT_FAIL("diffusion.timestep_sampling = \"logit_normal\": expected \"uniform\" with diffusion.objective = "
             "\"ddpm\" (the logit-normal density is over the flow's continuous t; no reference maps it to DDPM's "
             "discrete timesteps; set diffusion.objective = \"flow\")");
  require(d.min_snr_gamma > 0, "diffusion.min_snr_gamma", d.min_snr_gamma, "a value > 0");
  if (!flow && d.cosine_loss)
    DIT_FAIL("diffusion.cosine_loss = true: expected false with diffusion.objective = \"ddpm\" (the cosine "
             "term compares velocities; set diffusion.objective = \"flow\")");
}

// The [distill] rules that need no teacher (engine/distill.h checks the teacher and the pairs).
void validate_distill(const DistillSection& d) {
  if (d.teacher.empty()) return;
  // Weights beyond 1000 scale the loss's gradients past what fp32 keeps finite in a few steps.
  const std::string range = "a weight >= 0 and at most " + show(kMaxDistillWeight);
  require(d.output_weight >= 0 && d.output_weight <= kMaxDistillWeight, "distill.output_weight", d.output_weight, range);
  require(d.target_weight >= 0 && d.target_weight <= kMaxDistillWeight, "distill.target_weight", d.target_weight, range);
  require(d.feature_weight >= 0 && d.feature_weight <= kMaxDistillWeight, "distill.feature_weight", d.feature_weight,
          range + " (0: no feature loss)");
  require(d.output_weight + d.target_weight + d.feature_weight > 0, "distill.output_weight", d.output_weight,
          "a weight > 0 for at least one of distill.output_weight, target_weight and feature_weight");
  require(d.mask_sigma >= 0 && d.mask_sigma <= kMaxDistillWeight, "distill.mask_sigma", d.mask_sigma,
          "a number of standard deviations in [0, 1000] (0: no mask)");
  DIT_CHECK(d.student_layers.size() == d.teacher_layers.size(), "distill.student_layers = ", int_list(d.student_layers),
            ": expected as many entries as distill.teacher_layers = ", int_list(d.teacher_layers), " (they pair up)");
}

// The [sample] rules, shared by training and by `sample` / `evaluate`, whose flags set the same
// keys: each message names the key and the flag.
void validate_sample(const SampleSection& s, int diffusion_steps, int num_classes, diffusion::Objective objective) {
  const std::string steps = show(diffusion_steps);
  require(s.num_steps >= 2 && s.num_steps <= diffusion_steps, "sample.num_steps", s.num_steps,
          "an integer in [2, diffusion.steps = " + steps + "], i.e. 2 <= --steps <= " + steps +
              " (the model's diffusion.steps)");
  if (!diffusion::sampler_fits(s.sampler, objective))
    DIT_FAIL("sample.sampler = \"", name_of(diffusion::kSamplerNames, s.sampler), "\": expected ",
             diffusion::samplers_of(objective), " for diffusion.objective = \"",
             name_of(diffusion::kObjectiveNames, objective), "\" (--sampler)");
  require(s.last_step_size > 0 && s.last_step_size < 1, "sample.last_step_size", s.last_step_size,
          "a step in (0, 1) (euler_maruyama's last step from t = 1 - size to 1)");
  require(std::isfinite(s.cfg_scale) && s.cfg_scale >= 1, "sample.cfg_scale", s.cfg_scale,
          "a finite value >= 1 (--cfg-scale; 1 = no guidance)");
  // The guidance interval, one rule: the key that breaks it, and the pair as flags.
  const bool min_ok = s.cfg_t_min >= 0 && s.cfg_t_min <= 1;
  if (!(min_ok && s.cfg_t_max >= s.cfg_t_min && s.cfg_t_max <= 1))
    DIT_FAIL(min_ok ? "sample.cfg_t_max = " + show(s.cfg_t_max) + ": expected a noise level in [sample.cfg_t_min = " +
                          show(s.cfg_t_min) + ", 1]"
                    : "sample.cfg_t_min = " + show(s.cfg_t_min) + ": expected a noise level in [0, 1]",
             "; as flags, --cfg-t-min ", show(s.cfg_t_min), " --cfg-t-max ", show(s.cfg_t_max),
             ": expected 0 <= min <= max <= 1 (noise levels)");
  require(s.per_class >= 1, "sample.per_class", s.per_class, "an integer >= 1 (--per-class)");
  for (std::size_t i = 0; i < s.classes.size(); ++i)
    require(s.classes[i] >= 0 && s.classes[i] < num_classes, "sample.classes[" + show(i) + "]",
            s.classes[i], "a class in [0, model.num_classes = " + show(num_classes) + ") (--classes)");
}

}  // namespace

void RunConfig::validate_sample() const {
  dit::validate_sample(sample, diffusion.steps, model.dit.num_classes, diffusion.objective);
}

void RunConfig::validate_layout() const {
  validate();
  validate_parallel(parallel, model.dit);
}

void RunConfig::validate() const {
  validate_representable(*this);
  validate_model(model);
  validate_diffusion(diffusion, model.dit);
  validate_train(train);
  require(optim.zero >= 1 && optim.zero <= 3, "optim.zero", optim.zero,
          "1 (optimizer state sharded over data parallelism), 2 (and gradients) or 3 (and parameters)");
  require(optim.zero == 1 || train.backend != BackendKind::Cuda, "optim.zero", optim.zero,
          "1 on the cuda backend (it cannot yet hand the memory of sharded gradients and parameters back)");
  // At least 1 KiB (256 fp32 gradients): a smaller bucket rounds to no gradient at all.
  require(optim.bucket_mib >= 0.001 && optim.bucket_mib <= 4096, "optim.bucket_mib", optim.bucket_mib,
          "a message size in MiB in [0.001, 4096]: the gradient reduction's staging holds dp - 1 of them "
          "(25: 6.5 million fp32 gradients)");
  require_one_of("optim.offload", optim.offload, {"none", "cpu"});
  validate_parallel_common(parallel);
  if (parallel.layout == LayoutMode::Fixed) validate_parallel(parallel, model.dit);
  require(!data.path.empty(), "data.path", data.path, "a path to an HDF5 dataset");
  require_one_of("data.prepare", data.prepare, {"fashion-mnist", "none"});
  require(data.latent_scale > 0, "data.latent_scale", data.latent_scale, "a value > 0");
  validate_sample();
  validate_distill(distill);
  require(eval.per_class >= 1 && eval.per_class <= 100000, "eval.per_class", eval.per_class,
          "an integer in [1, 100000]");
  require(eval.num_steps >= 2 && eval.num_steps <= diffusion.steps, "eval.num_steps", eval.num_steps,
          "an integer in [2, diffusion.steps = " + show(diffusion.steps) + "]");
  require(!run.dir.empty(), "run.dir", run.dir, "a folder for the run's outputs");
  require(run.id.empty() || (run.id.size() == 32 && run.id.find_first_not_of("0123456789abcdef") == std::string::npos),
          "run.id", run.id, "32 lowercase hex digits (a run's identity, recorded when it starts) or \"\"");
}

}  // namespace dit
