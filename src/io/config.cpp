// The run configuration read from TOML (toml11 v3), overridden by `--set section.key=value`,
// validated and written back. One table of fields (`sections()`) drives reading, `--set`, writing
// and the "did you mean" hints, so a key added there is known to all four at once.
#include "io/config.h"

#include "io/config_fields.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cmath>
#include <filesystem>
#include <functional>
#include <fstream>
#include <limits>
#include <sstream>
#include <toml.hpp>
#include <type_traits>
#include <variant>

#include "core/error.h"
#include "core/quote.h"
#include "diffusion/noise_schedule.h"
#include "io/file_roles.h"
#include "io/toml_guard.h"
#include "io/utf8.h"

namespace dit {

namespace config_fields {

std::vector<Section> sections(RunConfig& c) {
  DiTConfig& m = c.model.dit;
  TrainSection& t = c.train;
  ParallelSection& p = c.parallel;
  SampleSection& s = c.sample;
  std::vector<Field> model = {{"preset", &c.model.preset}};
  for_each_model_field([&](const char* key, auto field, Stored) {
    if constexpr (std::is_member_object_pointer_v<decltype(field)>)
      model.push_back({key, &(m.*field)});
    else
      model.push_back({key, choice(&(m.*field.member), field.names())});
  });
  return {
      {"model", std::move(model)},
      {"diffusion",
       {{"steps", &c.diffusion.steps}, {"objective", choice(&c.diffusion.objective, diffusion::kObjectiveNames)},
        {"timestep_sampling", choice(&c.diffusion.timestep_sampling, diffusion::kTimestepSamplingNames)},
        {"logit_normal_mean", &c.diffusion.logit_normal_mean}, {"logit_normal_std", &c.diffusion.logit_normal_std},
        {"cosine_loss", &c.diffusion.cosine_loss},
        {"loss_weight", choice(&c.diffusion.loss_weight, diffusion::kLossWeightNames)},
        {"min_snr_gamma", &c.diffusion.min_snr_gamma}}},
      {"train",
       {{"global_batch", &t.global_batch}, {"micro_batch", &t.micro_batch}, {"steps", &t.steps},
        {"lr", &t.lr}, {"warmup", &t.warmup}, {"lr_schedule", choice(&t.lr_schedule, kLrScheduleNames)},
        {"min_lr", &t.min_lr}, {"weight_decay", &t.weight_decay}, {"beta1", &t.beta1},
        {"beta2", &t.beta2}, {"eps", &t.eps}, {"grad_clip", &t.grad_clip},
        {"ema_decay", &t.ema_decay}, {"ema_warmup", &t.ema_warmup}, {"seed", &t.seed},
        {"log_every", &t.log_every}, {"sample_every", &t.sample_every},
        {"eval_every", &t.eval_every},
        {"checkpoint_every", &t.checkpoint_every}, {"keep_checkpoints", &t.keep_checkpoints},
        {"peak_tflops", &t.peak_tflops}, {"precision", choice(&t.precision, kPrecisionNames)},
        {"backend", choice(&t.backend, kBackendNames)},
        {"loss_scale", &t.loss_scale}, {"loss_scale_window", &t.loss_scale_window},
        {"max_nonfinite_steps", &t.max_nonfinite_steps},
        {"recompute", choice(&t.recompute, kRecomputeNames)}, {"recompute_blocks", &t.recompute_blocks},
        {"grad_reduce", choice(&t.grad_reduce, kGradReduceNames)}, {"deterministic", &t.deterministic},
        {"tensorboard", &t.tensorboard}, {"profile", &t.profile}, {"straggler_margin", &t.straggler_margin},
        {"loss_spike_z", &t.loss_spike_z}, {"skip_loss_spikes", &t.skip_loss_spikes}}},
      {"optim", {{"zero", &c.optim.zero}, {"bucket_mib", &c.optim.bucket_mib}, {"overlap", &c.optim.overlap}, {"offload", &c.optim.offload}}},
      {"parallel",
       {{"layout", choice(&p.layout, kLayoutModeNames)}, {"hardware", &p.hardware}, {"memory_gib", &p.memory_gib},
        {"memory_margin", &p.memory_margin}, {"tune_candidates", &p.tune_candidates}, {"tune_steps", &p.tune_steps},
        {"tp", &p.tp}, {"pp", &p.pp}, {"schedule", choice(&p.schedule, kScheduleNames)}, {"pp_layers", &p.pp_layers},
        {"sequence_parallel", &p.sequence_parallel}, {"timeout_s", &p.timeout_s},
        {"virtual_stages", &p.virtual_stages}}},
      {"data",
       {{"path", &c.data.path}, {"prepare", &c.data.prepare},
        {"latent_scale", &c.data.latent_scale}, {"vae", &c.data.vae}, {"vae_config", &c.data.vae_config}}},
      {"sample",
       {{"num_steps", &s.num_steps}, {"sampler", choice(&s.sampler, diffusion::kSamplerNames)},
        {"last_step_size", &s.last_step_size}, {"cfg_scale", &s.cfg_scale},
        {"per_class", &s.per_class}, {"classes", &s.classes}, {"cfg_official", &s.cfg_official},
        {"cfg_t_min", &s.cfg_t_min}, {"cfg_t_max", &s.cfg_t_max}, {"seed", &s.seed},
        {"clip_denoised", choice(&s.clip_denoised, kClipSettingNames)}}},
      {"eval",
       {{"classifier", &c.eval.classifier}, {"reference", &c.eval.reference},
        {"per_class", &c.eval.per_class}, {"num_steps", &c.eval.num_steps}}},
      {"distill",
       {{"teacher", &c.distill.teacher}, {"output_weight", &c.distill.output_weight},
        {"target_weight", &c.distill.target_weight}, {"feature_weight", &c.distill.feature_weight},
        {"feature_decay", choice(&c.distill.feature_decay, kFeatureDecayNames)},
        {"student_layers", &c.distill.student_layers}, {"teacher_layers", &c.distill.teacher_layers},
        {"mask_sigma", &c.distill.mask_sigma}, {"teacher_crc32", &c.distill.teacher_crc32}}},
      {"run",
       {{"dir", &c.run.dir}, {"overwrite", &c.run.overwrite}, {"checkpoint_dir", &c.run.checkpoint_dir},
        {"resume", &c.run.resume}, {"init_from", &c.run.init_from}, {"id", &c.run.id}}},
  };
}

std::string join(const std::vector<std::string>& items, const char* sep) {
  std::string out;
  for (const auto& it : items) out += (out.empty() ? "" : sep) + it;
  return out;
}

}  // namespace config_fields

namespace {

using namespace config_fields;


// ---- names and hints -----------------------------------------------------------------------

std::string lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

// Edit distance with adjacent transpositions (optimal string alignment), case-insensitive.
std::size_t edit_distance(const std::string& a0, const std::string& b0) {
  const std::string a = lower(a0), b = lower(b0);
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i)
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

// The candidate nearest to `name`, or "" when none is close enough to be a plausible typo.
std::string closest(const std::string& name, const std::vector<std::string>& candidates) {
  std::string best;
  std::size_t best_d = 1 + name.size() / 4;
  for (const auto& cand : candidates) {
    const std::size_t d = edit_distance(name, cand);
    if (d <= best_d && (best.empty() || d < best_d)) best = cand, best_d = d;
  }
  return best;
}


[[noreturn]] void fail_unknown_section(const std::string& origin, const std::string& name,
                                       const std::vector<Section>& secs) {
  std::vector<std::string> names;
  for (const auto& s : secs) names.push_back(s.name);
  const std::string near = closest(name, names);
  DIT_FAIL(origin, ": unknown section [", name, "]",
           near.empty() ? "" : "; did you mean [" + near + "]?", " (sections: ", join(names), ")");
}

[[noreturn]] void fail_unknown_key(const std::string& origin, const Section& sec,
                                   const std::string& key, const std::vector<Section>& secs) {
  std::vector<std::string> keys;
  for (const auto& f : sec.fields) keys.push_back(f.key);
  std::string hint;
  const std::string near = closest(key, keys);
  if (!near.empty()) hint = std::string(sec.name) + "." + near;
  for (const auto& other : secs)  // the right key in the wrong section
    for (const auto& f : other.fields)
      if (hint.empty() && key == f.key) hint = std::string(other.name) + "." + f.key;
  DIT_FAIL(origin, ": unknown key ", sec.name, ".", key,
           hint.empty() ? "" : "; did you mean " + hint + "?", " (keys of [", sec.name,
           "]: ", join(keys), ")");
}

// ---- TOML values -> typed fields -----------------------------------------------------------

std::string type_name(const toml::value& v) {
  switch (v.type()) {
    case toml::value_t::integer: return "an integer";
    case toml::value_t::floating: return "a float";
    case toml::value_t::string: return "a string";
    case toml::value_t::boolean: return "a boolean";
    case toml::value_t::array: return "an array";
    case toml::value_t::table: return "a table";
    default: return "a date/time";
  }
}

// "a string ("ten")": the type and the value as given, cut short if long.
std::string describe(const toml::value& v) {
  std::string text = v.is_string() ? quote_string(v.as_string().str) : toml::format(v);
  std::replace(text.begin(), text.end(), '\n', ' ');
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return type_name(v) + " (" + text + ")";
}

// The literal as written. toml11 clamps numbers that do not fit (99999999999999999999999 reads as
// 2^63 - 1, 1e400 as the largest double); the text says whether they did.
std::string literal_text(const toml::value& v) {
  const toml::source_location loc = v.location();
  const std::string& line = loc.line_str();
  if (loc.column() == 0 || line.size() < loc.column() - 1 + loc.region()) return "";
  std::string text = line.substr(loc.column() - 1, loc.region());
  text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
  return text;
}

// A decimal integer literal outside the 64-bit range (hex, octal and binary literals are bounded
// by their digits' count in toml11 itself).
bool integer_overflows(const toml::value& v) {
  const std::string text = literal_text(v);
  if (text.empty() || text.find_first_of("xob") != std::string::npos) return false;
  std::int64_t parsed = 0;
  const char* first = text.data() + (text[0] == '+' ? 1 : 0);
  return std::from_chars(first, text.data() + text.size(), parsed).ec == std::errc::result_out_of_range;
}

std::int64_t to_integer(const toml::value& v, const std::string& key, const std::string& origin,
                        std::int64_t lo, std::int64_t hi) {
  if (!v.is_integer()) DIT_FAIL(origin, ": ", key, ": expected an integer, got ", describe(v));
  const std::int64_t x = v.as_integer();
  if ((x == std::numeric_limits<std::int64_t>::max() || x == std::numeric_limits<std::int64_t>::min()) &&
      integer_overflows(v))
    DIT_FAIL(origin, ": ", key, " = ", literal_text(v), ": expected an integer in [", lo, ", ", hi,
             "] (it does not fit 64 bits)");
  if (x < lo || x > hi)
    DIT_FAIL(origin, ": ", key, " = ", x, ": expected an integer in [", lo, ", ", hi, "]");
  return x;
}

// Integers are accepted where floats are expected (lr = 1 means 1.0); the reverse is not.
double to_float(const toml::value& v, const std::string& key, const std::string& origin) {
  double x = 0;
  if (v.is_floating()) x = v.as_floating();
  else if (v.is_integer()) x = static_cast<double>(v.as_integer());
  else DIT_FAIL(origin, ": ", key, ": expected a number, got ", describe(v));
  // nan and inf literals read as they are: validation names them with the key's rule (every float
  // must be finite, RunConfig::validate; the sampler's noise levels, validate_sample).
  if (std::fabs(x) == std::numeric_limits<double>::max() && v.is_floating()) {
    const std::string text = literal_text(v);
    errno = 0;
    std::strtod(text.c_str(), nullptr);
    if (errno == ERANGE) DIT_FAIL(origin, ": ", key, " = ", text, ": expected a finite number (beyond a double's range)");
  }
  return x;
}

template <class T>
void assign_typed(T* dst, const toml::value& v, const std::string& key, const std::string& origin) {
  constexpr std::int64_t kIntMin = std::numeric_limits<int>::min();
  constexpr std::int64_t kIntMax = std::numeric_limits<int>::max();
  constexpr std::int64_t kI64Max = std::numeric_limits<std::int64_t>::max();
  if constexpr (std::is_same_v<T, int>) {
    *dst = static_cast<int>(to_integer(v, key, origin, kIntMin, kIntMax));
  } else if constexpr (std::is_same_v<T, std::int64_t>) {
    *dst = to_integer(v, key, origin, std::numeric_limits<std::int64_t>::min(), kI64Max);
  } else if constexpr (std::is_same_v<T, std::uint64_t>) {
    *dst = static_cast<std::uint64_t>(to_integer(v, key, origin, 0, kI64Max));
  } else if constexpr (std::is_same_v<T, double>) {
    *dst = to_float(v, key, origin);
  } else if constexpr (std::is_same_v<T, bool>) {
    if (!v.is_boolean()) DIT_FAIL(origin, ": ", key, ": expected a boolean (true or false), got ", describe(v));
    *dst = v.as_boolean();
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!v.is_string()) DIT_FAIL(origin, ": ", key, ": expected a string, got ", describe(v));
    *dst = v.as_string().str;
  } else {
    if (!v.is_array()) DIT_FAIL(origin, ": ", key, ": expected an array of integers, got ", describe(v));
    std::vector<int> out;
    const auto& arr = v.as_array();
    for (std::size_t i = 0; i < arr.size(); ++i)
      out.push_back(
          static_cast<int>(to_integer(arr[i], key + "[" + std::to_string(i) + "]", origin, kIntMin, kIntMax)));
    *dst = std::move(out);
  }
}

void assign(const FieldRef& ref, const toml::value& v, const std::string& key, const std::string& origin) {
  if (const Choice* c = std::get_if<Choice>(&ref)) {
    // A choice named "true"/"false" (sample.clip_denoised) also takes the TOML boolean.
    if (v.is_boolean() && c->set(v.as_boolean() ? "true" : "false")) return;
    if (!v.is_string()) DIT_FAIL(origin, ": ", key, ": expected one of ", c->allowed, ", got ", describe(v));
    if (!c->set(v.as_string().str))
      DIT_FAIL(origin, ": ", key, " = ", quote_string(v.as_string().str), ": expected one of ", c->allowed);
    return;
  }
  std::visit(
      [&](const auto& field) {
        if constexpr (!std::is_same_v<std::decay_t<decltype(field)>, Choice>) assign_typed(field, v, key, origin);
      },
      ref);
}

// A preset overwrites depth/hidden_size/num_heads/patch_size and the block variants (mlp, norm,
// pos_embed, qk_norm; a LightningDiT preset also learn_sigma = false); any of those keys given
// next to it (in the same [model] table, or by a later --set) overrides the preset's value.
void apply_preset(RunConfig& c, const toml::value& v, const std::string& origin) {
  std::string name;
  assign(FieldRef(&name), v, "model.preset", origin);
  DiTConfig p;
  try {
    if (!name.empty()) p = dit_preset(name);
  } catch (const Error&) {
    DIT_FAIL(origin, ": model.preset = ", quote_string(name), ": expected one of ",
             join(dit_preset_names()), " (or \"\" for the explicit sizes)");
  }
  c.model.preset = name;
  if (name.empty()) return;
  c.model.dit.depth = p.depth;
  c.model.dit.hidden_size = p.hidden_size;
  c.model.dit.num_heads = p.num_heads;
  c.model.dit.patch_size = p.patch_size;
  c.model.dit.mlp = p.mlp;
  c.model.dit.norm = p.norm;
  c.model.dit.pos_embed = p.pos_embed;
  c.model.dit.qk_norm = p.qk_norm;
  if (name.rfind("LightningDiT-", 0) == 0) c.model.dit.learn_sigma = p.learn_sigma;
}

const Section* find_section(const std::vector<Section>& secs, const std::string& name) {
  for (const auto& s : secs)
    if (name == s.name) return &s;
  return nullptr;
}

const Field* find_field(const Section& sec, const std::string& key) {
  for (const auto& f : sec.fields)
    if (key == f.key) return &f;
  return nullptr;
}

// Applies a parsed document {section: {key: value}} to `c`: the one path for files and --set.
void apply_document(RunConfig& c, const toml::value& root, const std::string& origin) {
  const std::vector<Section> secs = sections(c);
  for (const auto& [name, table] : root.as_table()) {
    const Section* sec = find_section(secs, name);
    if (!table.is_table()) {
      if (sec) DIT_FAIL(origin, ": ", name, " must be a section [", name, "], got ", describe(table));
      std::vector<std::string> hits;  // a key written above every section header
      for (const auto& s : secs)
        if (find_field(s, name)) hits.push_back(std::string(s.name) + "." + name);
      DIT_FAIL(origin, ": key '", name, "' is outside any section",
               hits.empty() ? "" : "; did you mean " + join(hits, " or ") + "?",
               " (every key belongs under a section header such as [train])");
    }
    if (!sec) fail_unknown_section(origin, name, secs);
    const auto& entries = table.as_table();
    if (std::string(sec->name) == "model" && entries.count("preset"))
      apply_preset(c, entries.at("preset"), origin);  // first, so explicit sizes override it
    for (const auto& [key, value] : entries) {
      const Field* f = find_field(*sec, key);
      if (!f) fail_unknown_key(origin, *sec, key, secs);
      if (key == "preset" && std::string(sec->name) == "model") continue;
      assign(f->ref, value, name + "." + key, origin);
    }
  }
}

// ---- typed fields -> TOML text -------------------------------------------------------------

// Shortest text that reads back to the same double, always with a '.' or exponent (TOML float).
std::string format_double(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, x);
  std::string s(buf, res.ptr);
  const auto e = s.find('e');
  if (e == std::string::npos) return s.find('.') == std::string::npos ? s + ".0" : s;
  std::size_t digits = e + 1 + (s[e + 1] == '-' || s[e + 1] == '+');
  while (digits + 1 < s.size() && s[digits] == '0') s.erase(digits, 1);  // 1e-04 -> 1e-4
  return s;
}

}  // namespace

std::string config_fields::int_list(const std::vector<int>& v) {
  std::string out = "[";
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out + "]";
}

namespace {

std::string render(const FieldRef& ref) {
  return std::visit(
      [](const auto& field) -> std::string {
        using P = std::decay_t<decltype(field)>;
        if constexpr (std::is_same_v<P, Choice>) {
          return quote_string(field.get());
        } else {
          using T = std::remove_pointer_t<P>;
          if constexpr (std::is_same_v<T, double>) return format_double(*field);
          else if constexpr (std::is_same_v<T, bool>) return *field ? "true" : "false";
          else if constexpr (std::is_same_v<T, std::string>) return quote_string(*field);
          else if constexpr (std::is_same_v<T, std::vector<int>>) return int_list(*field);
          else return std::to_string(*field);
        }
      },
      ref);
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

toml::value parse_toml(const std::string& text, const std::string& origin) {
  check_utf8(text, origin);
  check_toml_nesting(text, origin);  // before toml11, which recurses per level
  std::istringstream is(text);
  try {
    return toml::parse(is, origin);
  } catch (const std::exception& e) {  // toml::syntax_error and friends
    DIT_FAIL(origin, ": invalid TOML: ", e.what());
  }
}

}  // namespace

bool ModelSection::operator==(const ModelSection& o) const {
  // DiTConfig has no operator== of its own: every field of the model's one table is compared.
  bool same = preset == o.preset;
  config_fields::for_each_model_field([&](const char*, auto field, config_fields::Stored) {
    if constexpr (std::is_member_object_pointer_v<decltype(field)>)
      same = same && dit.*field == o.dit.*field;
    else
      same = same && dit.*field.member == o.dit.*field.member;
  });
  return same;
}

diffusion::TrainObjective DiffusionSection::train_objective() const {
  diffusion::TrainObjective o;
  o.objective = objective;
  o.timesteps = {timestep_sampling, logit_normal_mean, logit_normal_std};
  o.cosine = cosine_loss ? diffusion::CosineTerm::Yes : diffusion::CosineTerm::No;
  o.weighting = {loss_weight, min_snr_gamma};
  return o;
}

RunConfig RunConfig::demo() {
  // Keep configs/fashion_mnist.toml equal to this (a unit test compares the two).
  RunConfig c;
  DiTConfig& m = c.model.dit;
  m.input_size = 32;  // 28x28 garments padded to 32
  m.patch_size = 4;
  m.in_channels = 1;
  m.hidden_size = 96;  // within a 10-minute budget on 2 cores, more steps of a smaller model beat a wider one
  m.depth = 4;
  m.num_heads = 4;
  m.mlp_ratio = 4.0;
  m.num_classes = 10;
  m.learn_sigma = false;  // a velocity model trains no variance
  m.class_dropout_prob = 0.1;
  // LightningDiT's block and recipe: the best measured on this demo (docs/recipes.md).
  m.mlp = MlpKind::Swiglu;
  m.norm = NormKind::RmsNorm;
  m.pos_embed = PosEmbed::Rope;
  c.diffusion.objective = diffusion::Objective::Flow;
  c.diffusion.timestep_sampling = diffusion::TimestepSampling::LogitNormal;
  c.diffusion.cosine_loss = true;
  c.train.global_batch = 32;
  c.train.micro_batch = 8;
  c.train.steps = 8000;
  c.train.lr = 3e-3;  // docs/recipes.md: the best of the learning-rate rows for this recipe
  c.train.warmup = 100;
  c.train.lr_schedule = LrSchedule::Cosine;
  c.train.grad_clip = 1.0;
  c.train.ema_decay = 0.9999;
  c.train.ema_warmup = true;  // at 0.9999 without warm-up, a short run's EMA is still the zero-initialized model
  c.train.log_every = 50;
  c.train.sample_every = 0;
  c.parallel.tp = 2;
  c.parallel.pp = 4;
  c.sample.num_steps = 50;
  c.sample.sampler = diffusion::SamplerKind::Euler;
  c.sample.cfg_scale = 6.0;  // guided at the less noisy half of the steps only: guidance at high noise costs diversity
  c.sample.cfg_t_max = 0.5;
  c.sample.per_class = 8;
  c.data.path = "data/fashion_mnist.h5";
  c.data.prepare = "fashion-mnist";
  c.run.dir = "runs/fashion_mnist";
  return c;
}

// Keys a file leaves out keep the struct defaults (config.h), not demo()'s values.
RunConfig RunConfig::from_toml(const std::string& text, const std::string& origin) {
  const toml::value root = parse_toml(text, origin);
  RunConfig c;
  apply_document(c, root, origin);
  try {
    c.validate();
  } catch (const Error& e) {
    throw Error(origin + ": " + e.what());
  }
  return c;
}

RunConfig RunConfig::from_file(const std::string& path) {
  // An ifstream opens a folder and reads it as empty text: a run on the defaults. Refuse it.
  std::error_code ec;
  DIT_CHECK(!std::filesystem::is_directory(path, ec), "config file '", path,
            "' is a directory: give a TOML file (e.g. configs/fashion_mnist.toml)");
  expect_kind("config file", path, FileKind::Config);  // never a FIFO (a read would block for ever)
  std::ifstream in(path, std::ios::binary);
  DIT_CHECK(in, "cannot open config file '", path, "'");
  std::ostringstream text;
  text << in.rdbuf();
  RunConfig c = from_toml(text.str(), path);
  c.run.id.clear();  // the record of the run that wrote the file, not an input: a run takes its own
  return c;
}

// Does not validate: several --set may pass through an inconsistent state (micro_batch raised
// before global_batch); the caller validates once all overrides are in.
void RunConfig::set(const std::string& assignment) { set(assignment, "--set " + assignment); }

void RunConfig::set(const std::string& assignment, const std::string& origin) {
  const auto eq = assignment.find('=');
  DIT_CHECK(eq != std::string::npos, origin,
            ": expected section.key=value (e.g. --set train.lr=1e-4), found no '='");
  const std::string key = trim(assignment.substr(0, eq));
  const std::string raw = trim(assignment.substr(eq + 1));
  const auto dot = key.find('.');
  DIT_CHECK(dot != std::string::npos && dot > 0 && dot + 1 < key.size() &&
                key.find('.', dot + 1) == std::string::npos,
            origin, ": the key '", key, "' must be section.key (e.g. train.lr)");
  const std::string section = key.substr(0, dot), name = key.substr(dot + 1);

  // The value in TOML syntax; when that fails it is a bare string (--set run.dir=out/x). A string
  // key also takes the raw text when the value reads as another type (--set run.dir=2024).
  check_utf8(assignment, origin);
  check_toml_nesting(raw, origin);
  toml::value value;
  bool parsed = false;
  try {
    std::istringstream is("x = " + raw);
    const toml::value doc = toml::parse(is, origin);
    if (doc.as_table().size() == 1 && doc.contains("x")) value = doc.at("x"), parsed = true;
  } catch (const std::exception&) {
  }
  const std::vector<Section> secs = sections(*this);
  const Section* sec = find_section(secs, section);
  const Field* f = sec ? find_field(*sec, name) : nullptr;
  const bool text_key = f && (std::holds_alternative<std::string*>(f->ref) || std::holds_alternative<Choice>(f->ref));
  if (!parsed || (text_key && !value.is_string()))
    value = toml::value(raw);

  toml::table entry, doc;
  entry[name] = value;
  doc[section] = toml::value(entry);
  apply_document(*this, toml::value(doc), origin);
}

std::string RunConfig::to_toml() const {
  RunConfig copy = *this;  // sections() hands out mutable pointers; read them from a copy
  std::ostringstream os;
  os << "# dit_mp run configuration, resolved: every key of every section.\n";
  for (const Section& sec : sections(copy)) {
    os << "\n[" << sec.name << "]\n";
    if (std::string(sec.name) == "model")
      os << "# a preset sets depth/hidden_size/num_heads/patch_size; keys given here override it\n";
    for (const Field& f : sec.fields) os << f.key << " = " << render(f.ref) << "\n";
  }
  return os.str();
}

}  // namespace dit
