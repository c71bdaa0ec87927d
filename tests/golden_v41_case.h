// Where the DeepSeek-V4.1 golden cases live (tests/golden_v41), for the
// tests that read them.
#pragma once

#include <fstream>
#include <sstream>
#include <string>

namespace dsv4 {

inline std::string golden_v41_dir(const std::string& name) { return std::string(DSV4_GOLDEN_V41_DIR) + "/" + name; }

inline std::string read_text_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace dsv4
