// Typed reads of config.json fields with errors that name the file and the
// field (config_json.cc, config_v41_json.cc).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <type_traits>
#include <vector>

#include "base/status.h"

namespace dsv4::json_fields {

// The text parsed as JSON; invalid JSON is an error naming src.
inline StatusOr<nlohmann::json> parse(const std::string& text, const std::string& src) {
  try {
    return nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    return invalid_argument(src + ": not valid JSON: " + e.what());
  }
}

// Reads key into out; a missing required key or a wrong type is an error.
template <class T>
Status read(const nlohmann::json& j, const char* key, T* out, bool required, const std::string& src) {
  if (!j.contains(key) || j[key].is_null()) {
    if (required) return invalid_argument(src + ": missing required field '" + key + "'");
    return Status::Ok();
  }
  const nlohmann::json& v = j[key];
  if constexpr (std::is_same_v<T, bool>) {
    if (!v.is_boolean()) return invalid_argument(src + ": field '" + key + "' must be true or false, got " + v.dump());
  } else if constexpr (std::is_integral_v<T>) {
    if (!v.is_number_integer()) return invalid_argument(src + ": field '" + key + "' must be an integer, got " + v.dump());
  } else {
    if (!v.is_number()) return invalid_argument(src + ": field '" + key + "' must be a number, got " + v.dump());
  }
  *out = v.get<T>();
  return Status::Ok();
}

// An array of integers (absent: left as is).
template <class T>
Status read_list(const nlohmann::json& j, const char* key, std::vector<T>* out, bool required, const std::string& src) {
  if (!j.contains(key) || j[key].is_null()) {
    if (required) return invalid_argument(src + ": missing required array '" + key + "'");
    return Status::Ok();
  }
  if (!j[key].is_array()) return invalid_argument(src + ": '" + key + "' must be an array");
  out->clear();
  for (const auto& v : j[key]) {
    if (!v.is_number_integer()) return invalid_argument(src + ": '" + key + "' entries must be integers");
    out->push_back(v.get<T>());
  }
  return Status::Ok();
}

}  // namespace dsv4::json_fields
