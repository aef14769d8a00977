// Golden file reading: config from /config attributes, tensors with shape checks.
#include "io/golden.h"

#include <cmath>

namespace dit {

namespace {
// A /config string attribute naming one value of an enum table, or `fallback` when absent.
template <class E, std::size_t N>
E read_choice(const h5::File& f, const char* attr, const Named<E> (&table)[N], E fallback) {
  const std::string c = "/config";
  if (!f.has_attr(c, attr)) return fallback;
  const std::string v = f.attr_string(c, attr);
  const auto e = value_of(table, v);
  DIT_CHECK(e.has_value(), f.path(), ": /config ", attr, " = '", v, "': expected ", names_of(table, " or "));
  return *e;
}

// An attribute the model has fixed: refuses a file that needs another value.
void check_fixed(const h5::File& f, const char* attr, double ours, const char* what) {
  if (!f.has_attr("/config", attr)) return;
  const double v = f.attr_double("/config", attr);
  DIT_CHECK(std::abs(v - ours) <= 1e-12 * std::abs(ours), f.path(), ": /config ", attr, " = ", v,
            " but dit_mp's ", what, " is ", ours);
}
}  // namespace

// LightningDiT's block variants (mlp, norm, pos_embed, qk_norm); absent attributes are DiT's.
void read_block_variants(const h5::File& f, DiTConfig& cfg) {
  cfg.mlp = read_choice(f, "mlp", kMlpNames, MlpKind::Gelu);
  cfg.norm = read_choice(f, "norm", kNormNames, NormKind::LayerNorm);
  cfg.pos_embed = read_choice(f, "pos_embed", kPosEmbedNames, PosEmbed::Sincos);
  if (f.has_attr("/config", "qk_norm")) cfg.qk_norm = f.attr_int("/config", "qk_norm") != 0;
  if (f.has_attr("/config", "mlp_hidden"))
    DIT_CHECK(f.attr_int("/config", "mlp_hidden") == cfg.ffn_hidden(), f.path(), ": /config mlp_hidden = ",
              f.attr_int("/config", "mlp_hidden"), " but mlp = ", name_of(kMlpNames, cfg.mlp),
              " with hidden_size x mlp_ratio = ", cfg.mlp_hidden(), " gives ", cfg.ffn_hidden());
  if (cfg.norm == NormKind::RmsNorm) check_fixed(f, "rmsnorm_eps", cfg.layernorm_eps, "RMSNorm eps (model.layernorm_eps)");
  if (cfg.qk_norm)
    check_fixed(f, "qk_norm_eps", cfg.norm == NormKind::RmsNorm ? 1e-6 : 1e-5, "q/k norm eps");
  if (cfg.pos_embed == PosEmbed::Rope) check_fixed(f, "rope_theta", 10000.0, "RoPE theta");
}

void write_block_variants(hid_t g, const DiTConfig& cfg, const std::string& where) {
  if (cfg.mlp != MlpKind::Gelu) h5::write_attr_string(g, "mlp", name_of(kMlpNames, cfg.mlp), where);
  if (cfg.norm != NormKind::LayerNorm) h5::write_attr_string(g, "norm", name_of(kNormNames, cfg.norm), where);
  if (cfg.pos_embed != PosEmbed::Sincos)
    h5::write_attr_string(g, "pos_embed", name_of(kPosEmbedNames, cfg.pos_embed), where);
  if (cfg.qk_norm) h5::write_attr_ints(g, "qk_norm", {1}, h5::AttrShape::Scalar, where);
}

GoldenFile::GoldenFile(const std::string& path) : file_(h5::File::open_read(path)) {
  const std::string c = "/config";
  DIT_CHECK(file_.exists(c), path, ": group /config is missing (not a golden file?)");
  auto geti = [&](const char* k) { return static_cast<int>(file_.attr_int(c, k)); };
  cfg_.input_size = geti("input_size");
  cfg_.patch_size = geti("patch_size");
  cfg_.in_channels = geti("in_channels");
  cfg_.hidden_size = geti("hidden_size");
  cfg_.depth = geti("depth");
  cfg_.num_heads = geti("num_heads");
  cfg_.mlp_ratio = file_.attr_double(c, "mlp_ratio");
  cfg_.num_classes = geti("num_classes");
  cfg_.learn_sigma = file_.attr_bool(c, "learn_sigma");
  cfg_.class_dropout_prob = file_.attr_double(c, "class_dropout_prob");
  if (file_.has_attr(c, "frequency_embedding_size"))
    cfg_.frequency_embedding_size = geti("frequency_embedding_size");
  if (file_.has_attr(c, "layernorm_eps")) cfg_.layernorm_eps = file_.attr_double(c, "layernorm_eps");
  read_block_variants(file_, cfg_);
  try {
    cfg_.validate();
  } catch (const Error& e) {
    DIT_FAIL(path, ": /config describes a model that cannot be built: ", e.what());
  }
  if (file_.has_attr(c, "out_channels"))
    DIT_CHECK(file_.attr_int(c, "out_channels") == cfg_.out_channels(), path,
              ": /config out_channels = ", file_.attr_int(c, "out_channels"), " but learn_sigma = ",
              cfg_.learn_sigma, " and in_channels = ", cfg_.in_channels, " imply ",
              cfg_.out_channels());
}

std::vector<double> GoldenFile::read(const std::string& dataset, const Shape& expected) const {
  return file_.read(dataset, expected).values;
}

std::vector<float> GoldenFile::read_f32(const std::string& dataset, const Shape& expected) const {
  auto d = read(dataset, expected);
  return std::vector<float>(d.begin(), d.end());
}

std::vector<std::int32_t> GoldenFile::read_labels(const std::string& dataset, std::int64_t n) const {
  const Shape s = file_.shape(dataset);
  DIT_CHECK(s == Shape({n}), path(), ": dataset '", dataset, "' has shape ", s.str(),
            ", expected (", n, ")");
  std::vector<std::int32_t> out;
  for (std::int64_t v : file_.read_ints(dataset)) {
    DIT_CHECK(v >= 0 && v <= cfg_.num_classes, path(), ": label ", v, " in '", dataset,
              "' is outside [0, ", cfg_.num_classes, "] (", cfg_.num_classes, " = null label)");
    out.push_back(static_cast<std::int32_t>(v));
  }
  return out;
}

void GoldenFile::load_params(ParamSet& ps, const std::string& group) const {
  for (std::size_t i = 0; i < ps.size(); ++i) {
    const ParamSpec& s = ps.specs()[i];
    ps.set_global(static_cast<int>(i), read_f32(group + "/" + s.name, s.global));
  }
}

}  // namespace dit
