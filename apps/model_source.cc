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

#include "base/logging.h"
#include "base/process_memory.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/byte_tokenizer.h"
#include "tokenizer/chat_encoding.h"
#include "tools/embedded_model.h"
#include "checkpoint/config_json.h"
#include "checkpoint/v41_loader.h"

namespace dsv4::app {
namespace {

// Bytes read across every load of one command (the ranks of a process
// load one after another), the rate, and the bar drawn on a terminal:
// "loading [#####.....]  45%  1.2/2.6 GiB  1.4 GB/s  ETA 1 s".
class LoadMeter {
 public:
  explicit LoadMeter(bool bar)
      : bar_(bar), start_(std::chrono::steady_clock::now()), resident_before_(process_memory().resident) {}

  LoadProgress progress() {
    return [this](uint64_t done, uint64_t total) { update(done, total); };
  }

  // "loaded 4.24 GB of weights in 3.1 s (1.37 GB/s): 4.20 GB resident, peak RSS 4.47 GB (0.01 GB before)"
  std::string summary(int64_t resident_weights) const {
    const double gb = (finished_ + current_) / 1e9, s = seconds();
    char line[200];
    std::snprintf(line, sizeof line,
                  "loaded %.2f GB of weights in %.1f s (%.2f GB/s): %.2f GB resident, peak RSS %.2f GB (%.2f GB before)",
                  gb, s, s > 0 ? gb / s : 0.0, resident_weights / 1e9, process_memory().peak_resident / 1e9,
                  resident_before_ / 1e9);
    return line;
  }

 private:
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

  void update(uint64_t done, uint64_t total) {
    if (done < current_) finished_ += current_total_;  // the next rank's load began
    current_ = done;
    current_total_ = total;
    if (!bar_) return;
    const double s = seconds();
    const int pct = total ? static_cast<int>(100.0 * done / total) : 100;
    if (pct == last_pct_ && s - last_draw_ < 0.25) return;
    last_pct_ = pct;
    last_draw_ = s;
    const double rate = s > 0 ? (finished_ + done) / s : 0.0;
    const double eta = rate > 0 ? (total - done) / rate : 0.0;
    const int width = 30, fill = pct * width / 100;
    std::fprintf(stderr, "\rloading [%.*s%.*s] %3d%%  %.2f/%.2f GiB  %.2f GB/s  ETA %.0f s   ", fill,
                 "##############################", width - fill, "..............................", pct,
                 done / 1073741824.0, total / 1073741824.0, rate / 1e9, eta);
    if (done == total) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  }

  const bool bar_;
  const std::chrono::steady_clock::time_point start_;
  const int64_t resident_before_;
  uint64_t finished_ = 0, current_ = 0, current_total_ = 0;
  int last_pct_ = -1;
  double last_draw_ = 0;
};

}  // namespace

std::string embedded_name(const std::string& dir) {
  if (dir.empty()) return "default";
  if (dir.starts_with(kEmbeddedPrefix)) return dir.substr(kEmbeddedPrefix.size());
  return "";
}

std::string model_name(const std::string& dir) {
  const std::string embedded = embedded_name(dir);
  if (embedded.empty()) return dir;
  return "embedded model '" + embedded + "'";
}

std::string served_model_name(const std::string& dir) {
  const std::string embedded = embedded_name(dir);
  if (!embedded.empty()) return "dsv4-" + embedded;
  return std::filesystem::path(dir).filename().string();
}

StatusOr<ModelDir> ModelDir::open(const std::string& dir) {
  const std::string embedded = embedded_name(dir);
  if (embedded.empty()) return ModelDir(dir, false);
  // A directory of our own (mkdtemp): another process, even one with our pid
  // in another container sharing /tmp, never writes or removes it.
  std::string tmp = (std::filesystem::temp_directory_path() / "dsv4-embedded-XXXXXX").string();
  if (mkdtemp(tmp.data()) == nullptr)
    return internal_error("cannot create a directory for the embedded model under " +
                          std::filesystem::temp_directory_path().string() + ": " + std::strerror(errno));
  ModelDir opened(tmp, true);  // removed again if the write fails
  DSV4_RETURN_IF_ERROR(write_embedded_model(embedded, tmp));
  return opened;
}

StatusOr<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& dir, int64_t vocab_size, std::string* name) {
  const std::string embedded = embedded_name(dir);
  if (!embedded.empty()) {
    std::string tokenizer_json, tokenizer_config;
    for (const EmbeddedFile& f : embedded_files()) {
      if (f.model != embedded) continue;
      if (f.path == "tokenizer.json") tokenizer_json = f.bytes;
      if (f.path == "tokenizer_config.json") tokenizer_config = f.bytes;
    }
    if (!tokenizer_json.empty()) {
      *name = model_name(dir) + "'s tokenizer.json (built in)";
      DSV4_ASSIGN_OR_RETURN(auto bpe, BpeTokenizer::from_json_text(tokenizer_json, tokenizer_config, *name));
      return std::unique_ptr<Tokenizer>(std::move(bpe));
    }
  } else if (std::filesystem::exists(dir + "/tokenizer.json")) {
    *name = dir + "/tokenizer.json";
    DSV4_ASSIGN_OR_RETURN(auto bpe, BpeTokenizer::load(dir));
    return std::unique_ptr<Tokenizer>(std::move(bpe));
  }
  *name = "byte-level (built in; the model has no tokenizer.json)";
  return std::unique_ptr<Tokenizer>(std::make_unique<ByteTokenizer>(vocab_size));
}

ModelDir::~ModelDir() {
  std::error_code ec;
  if (temporary_) std::filesystem::remove_all(path_, ec);
}

StatusOr<std::vector<int32_t>> chat_turn_tokens(const Tokenizer& tokenizer, const ModelConfig& config,
                                                const std::string& question, bool thinking) {
  ChatOptions options;
  options.format = config.family == ModelFamily::kV41 ? ChatFormat::kV41 : ChatFormat::kV4;
  options.mode = thinking ? ChatMode::kThinking : ChatMode::kChat;
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  messages.push_back({{"role", "user"}, {"content", question}});
  DSV4_ASSIGN_OR_RETURN(std::string text, encode_chat(messages, options));
  return tokenizer.encode(text);
}

StatusOr<std::unique_ptr<DeepseekV4>> load_model(const std::string& dir, kernels::Numerics numerics, bool progress_bar) {
  ModelOptions options;
  options.numerics = numerics;
  LoadMeter meter(progress_bar && isatty(STDERR_FILENO));
  options.on_progress = meter.progress();
  DSV4_ASSIGN_OR_RETURN(ModelDir source, ModelDir::open(dir));
  auto model = load_deepseek_v4(source.path(), options);
  if (!model.ok()) return model;
  if (progress_bar) log_info(meter.summary((*model)->weights().resident_bytes()));
  keep_step_memory();
  return model;
}

namespace {

// DeepSeek-V4.1 on its ranks, its weights packed for the fast kernels in
// fast numerics.
StatusOr<std::unique_ptr<Engine>> load_v41_engine(const std::string& dir, const EngineOptions& engine,
                                                  const ParallelOptions& parallel, kernels::Numerics numerics,
                                                  const KvCacheOptions& cache, LoadMeter& meter, bool progress_bar) {
  ModelOptions options;
  options.numerics = numerics;
  options.on_progress = meter.progress();
  DSV4_ASSIGN_OR_RETURN(auto executor, LocalExecutor::create(dir, options, parallel, cache));
  int64_t resident = 0;
  for (int r = 0; r < executor->topology().world; ++r) resident += executor->resident_bytes(r);
  if (progress_bar) log_info(meter.summary(resident));
  log_info("DeepSeek-V4.1 loaded (" + executor->describe() + ", " + kernels::numerics_name(numerics) +
           " numerics): " + std::to_string(resident >> 20) +
           " MiB resident; Engram tables read by row from the checkpoint's files");
  keep_step_memory();
  return Engine::create(std::move(executor), engine.scheduler);
}

}  // namespace

StatusOr<std::unique_ptr<Engine>> load_engine(const std::string& dir, const EngineOptions& engine,
                                              const ParallelOptions& parallel, kernels::Numerics numerics,
                                              bool progress_bar) {
  ModelOptions options;
  options.numerics = numerics;
  LoadMeter meter(progress_bar && isatty(STDERR_FILENO));
  options.on_progress = meter.progress();
  DSV4_ASSIGN_OR_RETURN(ModelDir source, ModelDir::open(dir));
  DSV4_ASSIGN_OR_RETURN(ModelConfig config, load_any_model_config(source.path() + "/config.json"));
  DSV4_ASSIGN_OR_RETURN(KvCacheOptions cache, Engine::cache_options(config, engine));
  if (config.family == ModelFamily::kV41)
    return load_v41_engine(source.path(), engine, parallel, numerics, cache, meter, progress_bar);
  DSV4_ASSIGN_OR_RETURN(auto executor, LocalExecutor::create(source.path(), options, parallel, cache));
  if (progress_bar) {
    int64_t resident = 0;
    for (int r = 0; r < executor->topology().world; ++r) resident += executor->resident_bytes(r);
    log_info(meter.summary(resident));
  }
  keep_step_memory();
  return Engine::create(std::move(executor), engine.scheduler);
}

void keep_step_memory() {
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

}  // namespace dsv4::app
