// The one table of the run configuration's fields, shared by the files that read, write and
// validate it (io/config.cpp, io/config_validate.cpp): every key of every section as a typed
// reference into a RunConfig, and the text helpers their messages use; and the one list of the
// model's fields, which drives the [model] section, its comparison, and the HDF5 /config that
// checkpoints, weights and golden files share (io/model_config_h5.cpp: write, read, differences).
// Internal to io/.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <variant>
#include <vector>

#include "core/named.h"
#include "io/config.h"

namespace dit::config_fields {

// An enum setting, read and written by the names of the enum's table.
struct Choice {
  std::function<std::string()> get;
  std::function<bool(const std::string&)> set;  // false: not one of the names
  std::string allowed;                          // "a, b, c"
};
template <class E, std::size_t N>
Choice choice(E* field, const Named<E> (&table)[N]) {
  return {[field, &table] { return std::string(name_of(table, *field)); },
          [field, &table](const std::string& name) {
            const auto v = value_of(table, name);
            if (v) *field = *v;
            return v.has_value();
          },
          names_of(table)};
}

using FieldRef = std::variant<int*, std::int64_t*, std::uint64_t*, double*, bool*, std::string*,
                              std::vector<int>*, Choice>;
struct Field {
  const char* key;
  FieldRef ref;
};
struct Section {
  const char* name;
  std::vector<Field> fields;
};

// How the HDF5 /config holds a model field: always; always in what dit_mp writes, but absent from
// golden files made before it was recorded (then the default holds, with LaterFields::Defaulted);
// or only where it is not DiT's (LightningDiT's block variants: absent means DiT's, so files of
// DiT models stay as they were).
enum class Stored { Always, Later, UnlessDits };

// An enum field of the model and the table of its names.
template <class E, std::size_t N>
struct EnumField {
  E DiTConfig::*member;
  const Named<E> (*table)[N];
  const Named<E> (&names() const)[N] { return *table; }
};
template <class E, std::size_t N>
constexpr EnumField<E, N> enum_field(E DiTConfig::*member, const Named<E> (&table)[N]) {
  return {member, &table};
}

// Every field of the model config, in the order of the TOML [model] section (after preset), the
// HDF5 /config and the differences. Calls visit(key, field, stored) for each, `field` being a
// pointer to an int, double or bool member of DiTConfig, or an EnumField.
template <class Visit>
void for_each_model_field(Visit&& visit) {
  visit("input_size", &DiTConfig::input_size, Stored::Always);
  visit("patch_size", &DiTConfig::patch_size, Stored::Always);
  visit("in_channels", &DiTConfig::in_channels, Stored::Always);
  visit("hidden_size", &DiTConfig::hidden_size, Stored::Always);
  visit("depth", &DiTConfig::depth, Stored::Always);
  visit("num_heads", &DiTConfig::num_heads, Stored::Always);
  visit("mlp_ratio", &DiTConfig::mlp_ratio, Stored::Always);
  visit("num_classes", &DiTConfig::num_classes, Stored::Always);
  visit("learn_sigma", &DiTConfig::learn_sigma, Stored::Always);
  visit("class_dropout_prob", &DiTConfig::class_dropout_prob, Stored::Always);
  visit("frequency_embedding_size", &DiTConfig::frequency_embedding_size, Stored::Later);
  visit("layernorm_eps", &DiTConfig::layernorm_eps, Stored::Later);
  visit("mlp", enum_field(&DiTConfig::mlp, kMlpNames), Stored::UnlessDits);
  visit("norm", enum_field(&DiTConfig::norm, kNormNames), Stored::UnlessDits);
  visit("pos_embed", enum_field(&DiTConfig::pos_embed, kPosEmbedNames), Stored::UnlessDits);
  visit("qk_norm", &DiTConfig::qk_norm, Stored::UnlessDits);
}

// Every key of every section, in the order to_toml() writes them. The pointers alias `c`.
std::vector<Section> sections(RunConfig& c);

std::string join(const std::vector<std::string>& items, const char* sep = ", ");
std::string int_list(const std::vector<int>& v);  // "[1, 2, 3]"

}  // namespace dit::config_fields
