// A DeepSeek-V4 model from a checkpoint directory: DIR/config.json, then
// this rank's share of the weights (options.experts, options.heads).
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "model/deepseek_v4.h"

namespace dsv4 {

StatusOr<std::unique_ptr<DeepseekV4>> load_deepseek_v4(const std::string& dir, const ModelOptions& options = {});

}  // namespace dsv4
