// Where the DeepSeek-V4.1 golden cases live (tests/golden_v41), for the
// tests that read them.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "checkpoint/safetensors.h"

namespace dsv4 {

inline std::string golden_v41_dir(const std::string& name) { return std::string(DSV4_GOLDEN_V41_DIR) + "/" + name; }

inline std::string read_text_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A golden tensor's values (a failure when it is missing).
template <typename T>
std::vector<T> read_tensor(const SafetensorsFile& f, const std::string& name) {
  const TensorInfo* t = f.find(name);
  EXPECT_NE(t, nullptr) << name;
  if (!t) return {};
  std::vector<T> v(t->nbytes / sizeof(T));
  EXPECT_TRUE(f.read(*t, 0, t->nbytes, v.data()).ok());
  return v;
}

}  // namespace dsv4
