// The model config's HDF5 schema (see model_config_h5.h).
#include "io/model_config_h5.h"

#include <sstream>

#include "core/error.h"

namespace dit::h5 {

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
  return os.str();
}

}  // namespace dit::h5
