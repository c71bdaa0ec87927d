#include "tools/embedded_model.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace dsv4 {

std::vector<std::string> embedded_model_names() {
  std::vector<std::string> names;
  for (const EmbeddedFile& f : embedded_files())
    if (std::find(names.begin(), names.end(), f.model) == names.end()) names.emplace_back(f.model);
  std::sort(names.begin(), names.end());
  return names;
}

Status write_embedded_model(std::string_view name, const std::string& dir) {
  bool found = false;
  for (const EmbeddedFile& f : embedded_files()) {
    if (f.model != name) continue;
    found = true;
    const std::filesystem::path path = std::filesystem::path(dir) / f.path;
    std::error_code ec;
    std::filesystem::create_directories(path.parent_path(), ec);
    std::ofstream out(path, std::ios::binary);
    out.write(f.bytes.data(), static_cast<std::streamsize>(f.bytes.size()));
    out.close();
    if (!out) return internal_error("cannot write " + path.string() + ": " + std::strerror(errno));
  }
  if (found) return Status();
  std::string names;
  for (const std::string& n : embedded_model_names()) names += (names.empty() ? "" : ", ") + n;
  return not_found("no embedded model '" + std::string(name) + "' (embedded: " + (names.empty() ? "none" : names) + ")");
}

}  // namespace dsv4
