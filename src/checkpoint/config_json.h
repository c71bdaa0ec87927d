// A checkpoint's config.json (HuggingFace key names) read into the model's
// hyperparameters and validated before any weight is touched, and written
// back for synthetic checkpoints.
#pragma once

#include <string>

#include "base/status.h"
#include "model/config.h"

namespace dsv4 {

// `source` names the text in errors (a path, or "--config").
StatusOr<ModelConfig> parse_model_config(const std::string& text, const std::string& source);
StatusOr<ModelConfig> load_model_config(const std::string& path);
std::string model_config_json(const ModelConfig& config);  // the released key names

}  // namespace dsv4
