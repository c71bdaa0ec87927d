// A checkpoint's config.json (HuggingFace key names) read into the model's
// hyperparameters and validated before any weight is touched, and written
// back for synthetic checkpoints.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>

#include "base/status.h"
#include "model/config.h"

namespace dsv4 {

// `source` names the text in errors (a path, or "--config").
StatusOr<ModelConfig> parse_model_config(const std::string& text, const std::string& source);
StatusOr<ModelConfig> load_model_config(const std::string& path);
// Either family's config (parse_model_config refuses V4.1 until it serves
// it; planning reads both).
StatusOr<ModelConfig> parse_any_model_config(const std::string& text, const std::string& source);
StatusOr<ModelConfig> load_any_model_config(const std::string& path);
std::string model_config_json(const ModelConfig& config);  // the released key names

// DeepSeek-V4.1 (model_type deepseek_v41): the release's nested config.json
// or the reference's ModelArgs form (config_v41_json.cc).
bool is_v41_config(const nlohmann::json& j);
StatusOr<ModelConfig> parse_v41_model_config(const std::string& text, const std::string& source);

}  // namespace dsv4
