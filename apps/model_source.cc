#include "model_source.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "model/synthetic.h"

namespace dsv4::app {
namespace {

// "loading [#####.....]  45%  1.2/2.6 GiB" redrawn in place.
LoadProgress progress_printer() {
  auto last = std::make_shared<int>(-1);
  return [last](uint64_t done, uint64_t total) {
    const int pct = total ? static_cast<int>(100.0 * done / total) : 100;
    if (pct == *last) return;
    *last = pct;
    const int width = 30, fill = pct * width / 100;
    std::fprintf(stderr, "\rloading [%.*s%.*s] %3d%%  %.2f/%.2f GiB", fill, "##############################",
                 width - fill, "..............................", pct, done / 1073741824.0, total / 1073741824.0);
    if (pct == 100) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  };
}

}  // namespace

std::string model_name(const std::string& dir) { return dir.empty() ? "embedded default model" : dir; }

StatusOr<std::unique_ptr<DeepseekV4>> load_model(const std::string& dir, bool progress_bar) {
  ModelOptions options;
  if (progress_bar && isatty(STDERR_FILENO)) options.on_progress = progress_printer();
  if (!dir.empty()) return DeepseekV4::load(dir, options);
  DSV4_ASSIGN_OR_RETURN(ModelConfig config, synthetic_config("default"));
  const std::string tmp = (std::filesystem::temp_directory_path() /
                           ("dsv4-embedded-default-" + std::to_string(getpid())))
                              .string();
  Status st = write_synthetic_checkpoint(config, SyntheticOptions{}, tmp);
  if (!st.ok()) return Status(st.code(), "cannot write the embedded default model: " + st.message());
  auto model = DeepseekV4::load(tmp, options);
  std::filesystem::remove_all(tmp);
  return model;
}

}  // namespace dsv4::app
