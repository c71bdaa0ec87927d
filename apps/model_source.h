// Where the commands get their model: a checkpoint directory, or a model
// built into the binary (tools/embedded_model.h: "embedded:NAME", or no
// --model for the default), written to a temporary directory and loaded
// like any checkpoint.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "model/deepseek_v4.h"
#include "runtime/engine.h"
#include "runtime/local_executor.h"
#include "tokenizer/tokenizer.h"

namespace dsv4::app {

// dir empty: the embedded default model; "embedded:NAME" another embedded one. progress_bar: draw a loading bar
// on stderr when it is a terminal.
StatusOr<std::unique_ptr<DeepseekV4>> load_model(const std::string& dir, kernels::Numerics numerics, bool progress_bar);

// The engine over ranks (threads) in `parallel`'s topology, each loading
// its share of the model in `dir` (empty: the embedded default model).
StatusOr<std::unique_ptr<Engine>> load_engine(const std::string& dir, const EngineOptions& engine,
                                              const ParallelOptions& parallel, kernels::Numerics numerics,
                                              bool progress_bar);

// A checkpoint directory to read: `dir`, or the embedded default model
// written to a temporary directory that is removed with this object.
class ModelDir {
 public:
  static StatusOr<ModelDir> open(const std::string& dir);
  ModelDir(ModelDir&& o) noexcept : path_(std::move(o.path_)), temporary_(o.temporary_) { o.temporary_ = false; }
  ~ModelDir();
  const std::string& path() const { return path_; }

 private:
  ModelDir(std::string path, bool temporary) : path_(std::move(path)), temporary_(temporary) {}
  std::string path_;
  bool temporary_;
};

// Called once the weights are loaded. Every forward step allocates and
// frees the same activation buffers, many above glibc's mmap threshold
// (capped at 32 MiB): by default each is mapped fresh, zeroed page by page
// and unmapped again, a third of a prefill chunk's time on the bench preset.
// From now on they come from the heap and freed memory stays for the next
// step. (Not before the load: its transient buffers should leave.)
void keep_step_memory();

// The embedded model a --model value names ("default" for none), or "" for
// a checkpoint directory.
std::string embedded_name(const std::string& dir);

// "embedded model 'default'" or the directory, for messages.
std::string model_name(const std::string& dir);

// The name the API serves the model under: "dsv4-default" for the embedded
// default, the directory's own name for a checkpoint.
std::string served_model_name(const std::string& dir);

// The model's tokenizer: its tokenizer.json (and tokenizer_config.json), or
// the byte-level tokenizer for a checkpoint without one. `name` says which,
// for the log.
StatusOr<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& dir, int64_t vocab_size, std::string* name);

// `question` as a user's chat turn in the model's chat encoding (V4 or
// V4.1, thinking mode or not), as the chat API renders it, in tokens.
StatusOr<std::vector<int32_t>> chat_turn_tokens(const Tokenizer& tokenizer, const ModelConfig& config,
                                                const std::string& question, bool thinking);

}  // namespace dsv4::app
