// The engine and sampling options `run` and `serve` share, read from the
// command line with the names vLLM uses.
#pragma once

#include <set>
#include <string>

#include "args.h"
#include "runtime/engine.h"
#include "sched/sampling_params.h"

namespace dsv4::app {

// Option names engine_options / sampling_params read.
std::set<std::string> engine_option_names();
std::set<std::string> sampling_option_names();
extern const char* kEngineHelp;
extern const char* kSamplingHelp;

// Errors (a malformed number) are left in args.error().
EngineOptions engine_options(Args& args);
SamplingParams sampling_params(Args& args, const SamplingParams& defaults);

}  // namespace dsv4::app
