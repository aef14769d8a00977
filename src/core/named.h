// The names of an enum's values, one table per enum next to the enum itself, so that parsing a
// setting, printing it, the list of allowed values in an error message and the --help text all
// come from one place: `inline constexpr Named<Recompute> kRecomputeNames[] = {{Recompute::None,
// "none"}, ...}`.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace dit {

template <class E>
struct Named {
  E value;
  const char* name;
};

template <class E, std::size_t N>
constexpr const char* name_of(const Named<E> (&table)[N], E value) {
  for (const Named<E>& n : table)
    if (n.value == value) return n.name;
  return "?";
}

template <class E, std::size_t N>
std::optional<E> value_of(const Named<E> (&table)[N], std::string_view name) {
  for (const Named<E>& n : table)
    if (name == n.name) return n.value;
  return std::nullopt;
}

// "a, b, c" (sep ", "), or with `last` = " or ": "a, b or c".
template <class E, std::size_t N>
std::string names_of(const Named<E> (&table)[N], const char* last = ", ") {
  std::string out;
  for (std::size_t i = 0; i < N; ++i) out += (i == 0 ? "" : i + 1 == N ? last : ", ") + std::string(table[i].name);
  return out;
}

}  // namespace dit
