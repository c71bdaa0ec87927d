// The configurations of the released DeepSeek-V4 checkpoints (their
// config.json), for what is computed from a config alone: the KV cache's
// bytes per token, and synthetic checkpoints of the released shapes.
#pragma once

#include <string>

#include "base/status.h"
#include "model/config.h"

namespace dsv4 {

// "flash" (DeepSeek-V4-Flash) or "pro" (DeepSeek-V4-Pro).
StatusOr<ModelConfig> released_config(const std::string& name);
// Their config.json fields as JSON text (for synthetic presets to patch);
// empty for an unknown name.
std::string released_config_json(const std::string& name);

}  // namespace dsv4
