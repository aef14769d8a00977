// The model config's HDF5 schema (see model_config_h5.h).
#include "io/model_config_h5.h"

#include <cmath>
#include <sstream>
#include <type_traits>

#include "core/error.h"
#include "core/named.h"
#include "io/config_fields.h"

namespace dit::h5 {

using config_fields::for_each_model_field;
using config_fields::Stored;

namespace {

// A /config string attribute naming one value of an enum table.
template <class E, std::size_t N>
E read_choice(const File& f, const char* attr, const Named<E> (&table)[N]) {
  const std::string c = "/config";
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

// What LightningDiT's block variants fix, when a file records it (the variants themselves, string
// attrs mlp, norm, pos_embed and int qk_norm, are fields of the table: absent means DiT's block).
void check_block_variants(const File& f, const DiTConfig& cfg) {
  if (f.has_attr("/config", "mlp_hidden"))
    DIT_CHECK(f.attr_int("/config", "mlp_hidden") == cfg.ffn_hidden(), f.path(), ": /config mlp_hidden = ",
              f.attr_int("/config", "mlp_hidden"), " but mlp = ", name_of(kMlpNames, cfg.mlp),
              " with hidden_size x mlp_ratio = ", cfg.mlp_hidden(), " gives ", cfg.ffn_hidden());
  if (cfg.norm == NormKind::RmsNorm) check_fixed(f, "rmsnorm_eps", cfg.layernorm_eps, "RMSNorm eps (model.layernorm_eps)");
  if (cfg.qk_norm) check_fixed(f, "qk_norm_eps", cfg.norm == NormKind::RmsNorm ? 1e-6 : 1e-5, "q/k norm eps");
  if (cfg.pos_embed == PosEmbed::Rope) check_fixed(f, "rope_theta", 10000.0, "RoPE theta");
}

}  // namespace

Handle write_model_config(hid_t file, const DiTConfig& c, const std::string& where) {
  Handle g = create_group(file, "/config", where);
  const hid_t id = g.get();
  const DiTConfig dits;  // the block variants are written only where they differ from DiT's
  for_each_model_field([&](const char* key, auto field, Stored stored) {
    using F = decltype(field);
    if constexpr (std::is_same_v<F, double DiTConfig::*>) {
      write_attr_double(id, key, c.*field, where);
    } else if constexpr (std::is_member_object_pointer_v<F>) {  // int or bool
      if (stored == Stored::UnlessDits && c.*field == dits.*field) return;
      write_attr_ints(id, key, {std::int64_t(c.*field)}, AttrShape::Scalar, where);
    } else {
      if (stored == Stored::UnlessDits && c.*field.member == dits.*field.member) return;
      write_attr_string(id, key, name_of(field.names(), c.*field.member), where);
    }
  });
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
  DiTConfig c;  // an absent field that may be absent keeps its default
  for_each_model_field([&](const char* key, auto field, Stored stored) {
    using F = decltype(field);
    if (stored == Stored::UnlessDits || (stored == Stored::Later && defaulted))
      if (!f.has_attr(g, key)) return;
    if constexpr (std::is_same_v<F, int DiTConfig::*>) {
      c.*field = geti(key);
    } else if constexpr (std::is_same_v<F, double DiTConfig::*>) {
      c.*field = read_attr_double(f, g, key);
    } else if constexpr (std::is_same_v<F, bool DiTConfig::*>) {
      c.*field = (stored == Stored::UnlessDits ? f.attr_int(g, key) : read_attr_int(f, g, key)) != 0;
    } else {
      c.*field.member = read_choice(f, key, field.names());
    }
  });
  check_block_variants(f, c);
  try {
    validate_model_sizes(c, "");  // the file's own attribute names
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
  for_each_model_field([&](const char* key, auto f, Stored) {
    if constexpr (std::is_member_object_pointer_v<decltype(f)>)
      field(key, a.*f, b.*f);
    else
      field(key, std::string(name_of(f.names(), a.*f.member)), std::string(name_of(f.names(), b.*f.member)));
  });
  return os.str();
}

}  // namespace dit::h5
