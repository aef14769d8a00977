// The model config's HDF5 schema (see model_config_h5.h).
#include "io/model_config_h5.h"

#include <cmath>
#include <sstream>

#include "core/error.h"
#include "core/named.h"

namespace dit::h5 {

namespace {

// A /config string attribute naming one value of an enum table, or `fallback` when absent.
template <class E, std::size_t N>
E read_choice(const File& f, const char* attr, const Named<E> (&table)[N], E fallback) {
  const std::string c = "/config";
  if (!f.has_attr(c, attr)) return fallback;
  const std::string v = f.attr_string(c, attr);
  const auto e = value_of(table, v);
  DIT_CHECK(e.has_value(), f.path(), ": /config ", attr, " = '", v, "': expected ", names_of(table, " or "));
  return *e;
}

// An attribute the model has fixed: refuses a file that needs another value.
void check_fixed(const File& f, const char* attr, double ours, const char* what) {
  if (!f.has_attr("/config", attr)) return;
  const double v = f.attr_double("/config", attr);
  DIT_CHECK(std::abs(v - ours) <= 1e-12 * std::abs(ours), f.path(), ": /config ", attr, " = ", v,
            " but dit_mp's ", what, " is ", ours);
}

// LightningDiT's block variants: string attrs mlp, norm, pos_embed and int qk_norm. Absent
// attributes mean DiT's block, so files written before the variants read unchanged; they are
// written only where they are not DiT's, so files of DiT models stay as they were.
void read_block_variants(const File& f, DiTConfig& cfg) {
  cfg.mlp = read_choice(f, "mlp", kMlpNames, MlpKind::Gelu);
  cfg.norm = read_choice(f, "norm", kNormNames, NormKind::LayerNorm);
  cfg.pos_embed = read_choice(f, "pos_embed", kPosEmbedNames, PosEmbed::Sincos);
  if (f.has_attr("/config", "qk_norm")) cfg.qk_norm = f.attr_int("/config", "qk_norm") != 0;
  if (f.has_attr("/config", "mlp_hidden"))
    DIT_CHECK(f.attr_int("/config", "mlp_hidden") == cfg.ffn_hidden(), f.path(), ": /config mlp_hidden = ",
              f.attr_int("/config", "mlp_hidden"), " but mlp = ", name_of(kMlpNames, cfg.mlp),
              " with hidden_size x mlp_ratio = ", cfg.mlp_hidden(), " gives ", cfg.ffn_hidden());
  if (cfg.norm == NormKind::RmsNorm) check_fixed(f, "rmsnorm_eps", cfg.layernorm_eps, "RMSNorm eps (model.layernorm_eps)");
  if (cfg.qk_norm) check_fixed(f, "qk_norm_eps", cfg.norm == NormKind::RmsNorm ? 1e-6 : 1e-5, "q/k norm eps");
  if (cfg.pos_embed == PosEmbed::Rope) check_fixed(f, "rope_theta", 10000.0, "RoPE theta");
}

void write_block_variants(hid_t g, const DiTConfig& cfg, const std::string& where) {
  if (cfg.mlp != MlpKind::Gelu) write_attr_string(g, "mlp", name_of(kMlpNames, cfg.mlp), where);
  if (cfg.norm != NormKind::LayerNorm) write_attr_string(g, "norm", name_of(kNormNames, cfg.norm), where);
  if (cfg.pos_embed != PosEmbed::Sincos) write_attr_string(g, "pos_embed", name_of(kPosEmbedNames, cfg.pos_embed), where);
  if (cfg.qk_norm) write_attr_ints(g, "qk_norm", {1}, AttrShape::Scalar, where);
}

}  // namespace

Handle write_model_config(hid_t file, const DiTConfig& c, const std::string& where) {
  Handle g = create_group(file, "/config", where);
  const hid_t id = g.get();
  auto i = [&](const char* k, std::int64_t v) { write_attr_ints(id, k, {v}, AttrShape::Scalar, where); };
  auto d = [&](const char* k, double v) { write_attr_double(id, k, v, where); };
  i("input_size", c.input_size);
  i("patch_size", c.patch_size);
  i("in_channels", c.in_channels);
  i("hidden_size", c.hidden_size);
  i("depth", c.depth);
  i("num_heads", c.num_heads);
  d("mlp_ratio", c.mlp_ratio);
  i("num_classes", c.num_classes);
  i("learn_sigma", c.learn_sigma ? 1 : 0);
  d("class_dropout_prob", c.class_dropout_prob);
  i("frequency_embedding_size", c.frequency_embedding_size);
  d("layernorm_eps", c.layernorm_eps);
  write_block_variants(id, c, where);
  return g;
}

DiTConfig read_model_config(const File& f, LaterFields later, const std::string& missing) {
  const std::string g = "/config";
  DIT_CHECK(f.exists(g), f.path(), ": group /config is missing (", missing, ")");
  auto geti = [&](const char* k) {
    const std::int64_t v = read_attr_int(f, g, k);
    DIT_CHECK(v >= 0 && v < (std::int64_t(1) << 31), f.path(), ": /config@", k, " = ", v);
    return static_cast<int>(v);
  };
  const bool defaulted = later == LaterFields::Defaulted;
  DiTConfig c;
  c.input_size = geti("input_size");
  c.patch_size = geti("patch_size");
  c.in_channels = geti("in_channels");
  c.hidden_size = geti("hidden_size");
  c.depth = geti("depth");
  c.num_heads = geti("num_heads");
  c.mlp_ratio = read_attr_double(f, g, "mlp_ratio");
  c.num_classes = geti("num_classes");
  c.learn_sigma = read_attr_int(f, g, "learn_sigma") != 0;
  c.class_dropout_prob = read_attr_double(f, g, "class_dropout_prob");
  if (!defaulted || f.has_attr(g, "frequency_embedding_size"))
    c.frequency_embedding_size = geti("frequency_embedding_size");
  if (!defaulted || f.has_attr(g, "layernorm_eps")) c.layernorm_eps = read_attr_double(f, g, "layernorm_eps");
  read_block_variants(f, c);
  try {
    c.validate();
  } catch (const Error& e) {
    DIT_FAIL(f.path(), ": /config describes a model that cannot be built: ", e.what());
  }
  if (f.has_attr(g, "out_channels"))
    DIT_CHECK(read_attr_int(f, g, "out_channels") == c.out_channels(), f.path(), ": /config out_channels = ",
              read_attr_int(f, g, "out_channels"), " but learn_sigma = ", c.learn_sigma,
              " and in_channels = ", c.in_channels, " imply ", c.out_channels());
  return c;
}

std::string config_differences(const DiTConfig& a, const DiTConfig& b) {
  std::ostringstream os;
  auto field = [&](const char* name, auto x, auto y) {
    if (x == y) return;
    os << (os.tellp() > 0 ? ", " : "") << name << " " << x << " vs " << y;
  };
  field("input_size", a.input_size, b.input_size);
  field("patch_size", a.patch_size, b.patch_size);
  field("in_channels", a.in_channels, b.in_channels);
  field("hidden_size", a.hidden_size, b.hidden_size);
  field("depth", a.depth, b.depth);
  field("num_heads", a.num_heads, b.num_heads);
  field("mlp_ratio", a.mlp_ratio, b.mlp_ratio);
  field("num_classes", a.num_classes, b.num_classes);
  field("learn_sigma", a.learn_sigma, b.learn_sigma);
  field("class_dropout_prob", a.class_dropout_prob, b.class_dropout_prob);
  field("frequency_embedding_size", a.frequency_embedding_size, b.frequency_embedding_size);
  field("layernorm_eps", a.layernorm_eps, b.layernorm_eps);
  field("mlp", std::string(name_of(kMlpNames, a.mlp)), std::string(name_of(kMlpNames, b.mlp)));
  field("norm", std::string(name_of(kNormNames, a.norm)), std::string(name_of(kNormNames, b.norm)));
  field("pos_embed", std::string(name_of(kPosEmbedNames, a.pos_embed)), std::string(name_of(kPosEmbedNames, b.pos_embed)));
  field("qk_norm", a.qk_norm, b.qk_norm);
  return os.str();
}

}  // namespace dit::h5
