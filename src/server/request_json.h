// Reading request-body fields without exceptions. nlohmann's value() throws
// when a field holds another type (null included), which would turn a
// client's mistake into a 500; these read what is there or fall back, and
// the parsers name the problem with a 400.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace dsv4 {

// b has field k, and it is not null.
inline bool given(const nlohmann::ordered_json& b, const char* k) {
  return b.is_object() && b.contains(k) && !b[k].is_null();
}

// b[k] when b is an object and that field is a string; else fallback.
inline std::string string_field(const nlohmann::ordered_json& b, const char* k, const std::string& fallback = "") {
  if (!b.is_object()) return fallback;
  const auto it = b.find(k);
  return it != b.end() && it->is_string() ? it->get<std::string>() : fallback;
}

}  // namespace dsv4
