// The engine and sampling options `run` and `serve` share, read from the
// command line with the names vLLM uses.
#pragma once

#include <set>
#include <string>

#include "args.h"
#include "kernels/dispatch.h"
#include "runtime/engine.h"
#include "runtime/local_executor.h"
#include "sched/sampling_params.h"

namespace dsv4::app {

// Option names engine_options / sampling_params / parallel_options read
// (parallel_flag_names: the ones without a value).
std::set<std::string> engine_option_names();
std::set<std::string> engine_flag_names();
std::set<std::string> parallel_option_names();
std::set<std::string> parallel_flag_names();
extern const char* kParallelHelp;
std::set<std::string> sampling_option_names();
extern const char* kEngineHelp;
extern const char* kSamplingHelp;

// Errors (a malformed number) are left in args.error().
EngineOptions engine_options(Args& args);
// --numerics exact|fast, else DSV4_NUMERICS, else `fallback`.
kernels::Numerics numerics_option(Args& args, kernels::Numerics fallback);
extern const char* kNumericsHelp;
ParallelOptions parallel_options(Args& args);
// --numa auto|off for ranks as threads of this process: on a machine with
// several NUMA nodes (auto), the ranks placed on them (numa_placement.h:
// one a node, tensor parallel across them unless --tp/--dp say otherwise)
// and each pinned there with its own pool; on one node nothing changes.
// Logs the machine and the placement.
Status place_on_this_machine(Args& args, ParallelOptions* p);
SamplingParams sampling_params(Args& args, const SamplingParams& defaults);

}  // namespace dsv4::app
