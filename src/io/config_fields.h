// The one table of the run configuration's fields, shared by the files that read, write and
// validate it (io/config.cpp, io/config_validate.cpp): every key of every section as a typed
// reference into a RunConfig, and the text helpers their messages use. Internal to io/.
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

// Every key of every section, in the order to_toml() writes them. The pointers alias `c`.
std::vector<Section> sections(RunConfig& c);

std::string join(const std::vector<std::string>& items, const char* sep = ", ");
std::string int_list(const std::vector<int>& v);  // "[1, 2, 3]"

}  // namespace dit::config_fields
