// An enum's names as one table {value, "name"}: parsing and naming read the same rows, so the
// two directions (and the list an error message gives) cannot drift apart.
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace shardtrain::runtime {

template <typename E>
struct EnumName {
  E value;
  const char* name;
};

// The row whose name is s, or nullopt (the caller's error names its option and the choices).
template <typename E, size_t N>
std::optional<E> parse_enum(const EnumName<E> (&table)[N], std::string_view s) {
  for (const auto& row : table)
    if (s == row.name) return row.value;
  return std::nullopt;
}

// The name of v; "" for a value the table lacks.
template <typename E, size_t N>
const char* enum_name(const EnumName<E> (&table)[N], E v) {
  for (const auto& row : table)
    if (row.value == v) return row.name;
  return "";
}

// The names in table order as a message lists them: "a, b or c".
template <typename E, size_t N>
std::string enum_choices(const EnumName<E> (&table)[N]) {
  std::string out;
  for (size_t i = 0; i < N; ++i)
    out += std::string(i == 0 ? "" : i + 1 == N ? " or " : ", ") + table[i].name;
  return out;
}

}  // namespace shardtrain::runtime
