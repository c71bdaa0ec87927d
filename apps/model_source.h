// Where the commands get their model: a checkpoint directory, or the
// embedded default model (the seeded synthetic "default" preset, written to
// a temporary directory and loaded like any checkpoint).
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "model/deepseek_v4.h"

namespace dsv4::app {

// dir empty: the embedded default model. progress_bar: draw a loading bar
// on stderr when it is a terminal.
StatusOr<std::unique_ptr<DeepseekV4>> load_model(const std::string& dir, bool progress_bar);

// "embedded default model" or the directory, for messages.
std::string model_name(const std::string& dir);

}  // namespace dsv4::app
