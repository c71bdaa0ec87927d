#include "checkpoint/model_loader.h"
#include "model_source.h"

#include <malloc.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "tools/synthetic.h"
#include "checkpoint/config_json.h"

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

StatusOr<ModelDir> ModelDir::open(const std::string& dir) {
  if (!dir.empty()) return ModelDir(dir, false);
  DSV4_ASSIGN_OR_RETURN(ModelConfig config, synthetic_config("default"));
  // A directory of our own (mkdtemp): another process, even one with our pid
  // in another container sharing /tmp, never writes or removes it.
  std::string tmp = (std::filesystem::temp_directory_path() / "dsv4-embedded-default-XXXXXX").string();
  if (mkdtemp(tmp.data()) == nullptr)
    return internal_error("cannot create a directory for the embedded default model under " +
                            std::filesystem::temp_directory_path().string() + ": " + std::strerror(errno));
  Status st = write_synthetic_checkpoint(config, SyntheticOptions{}, tmp);
  if (!st.ok()) return Status(st.code(), "cannot write the embedded default model: " + st.message());
  return ModelDir(tmp, true);
}

ModelDir::~ModelDir() {
  std::error_code ec;
  if (temporary_) std::filesystem::remove_all(path_, ec);
}

StatusOr<std::unique_ptr<DeepseekV4>> load_model(const std::string& dir, kernels::Numerics numerics, bool progress_bar) {
  ModelOptions options;
  options.numerics = numerics;
  if (progress_bar && isatty(STDERR_FILENO)) options.on_progress = progress_printer();
  DSV4_ASSIGN_OR_RETURN(ModelDir source, ModelDir::open(dir));
  auto model = load_deepseek_v4(source.path(), options);
  if (model.ok()) keep_step_memory();
  return model;
}

StatusOr<std::unique_ptr<Engine>> load_engine(const std::string& dir, const EngineOptions& engine,
                                              const ParallelOptions& parallel, kernels::Numerics numerics,
                                              bool progress_bar) {
  ModelOptions options;
  options.numerics = numerics;
  if (progress_bar && isatty(STDERR_FILENO)) options.on_progress = progress_printer();
  DSV4_ASSIGN_OR_RETURN(ModelDir source, ModelDir::open(dir));
  DSV4_ASSIGN_OR_RETURN(ModelConfig config, load_model_config(source.path() + "/config.json"));
  DSV4_ASSIGN_OR_RETURN(KvCacheOptions cache, Engine::cache_options(config, engine));
  DSV4_ASSIGN_OR_RETURN(auto executor, LocalExecutor::create(source.path(), options, parallel, cache));
  keep_step_memory();
  return Engine::create(std::move(executor), engine.scheduler);
}

void keep_step_memory() {
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

}  // namespace dsv4::app
