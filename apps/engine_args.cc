#include "engine_args.h"

#include <cstdlib>

#include <nlohmann/json.hpp>

#include "base/logging.h"
#include "dist/numa_placement.h"
#include "tools/capacity_plan.h"

namespace dsv4::app {
namespace {

// 123, 64K, 512M, 2G (powers of 1024); -1 when it is not a size.
int64_t parse_bytes(Args& args, const std::string& key) {
  auto v = parse_byte_size(args.get(key));
  return v.ok() && *v > 0 ? *v : -1;
}

double parse_double(Args& args, const std::string& key, double def, bool* bad) {
  if (!args.has(key)) return def;
  const std::string v = args.get(key);
  char* end = nullptr;
  double d = std::strtod(v.c_str(), &end);
  if (v.empty() || *end) *bad = true;
  return d;
}

// vLLM's --speculative-config: {"method": "mtp" | "dspark", "num_speculative_tokens": K},
// and for DSpark "confidence_threshold": T.
int speculative_tokens(Args& args, SchedulerOptions* sched) {
  SchedulerOptions::Drafter* drafter = &sched->drafter;
  if (!args.has("speculative-config")) return 0;
  const nlohmann::json j = nlohmann::json::parse(args.get("speculative-config"), nullptr, false);
  if (!j.is_object()) {
    args.set_error("--speculative-config needs a JSON object such as '{\"method\":\"mtp\",\"num_speculative_tokens\":3}'");
    return 0;
  }
  for (const auto& [key, value] : j.items()) {
    if (key != "method" && key != "num_speculative_tokens" && key != "confidence_threshold") {
      args.set_error("--speculative-config: unknown field \"" + key +
                     "\" (known: method, num_speculative_tokens, confidence_threshold)");
      return 0;
    }
  }
  const auto method = j.find("method");
  if (method == j.end() || !method->is_string() || (*method != "mtp" && *method != "deepseek_mtp" && *method != "dspark")) {
    args.set_error("--speculative-config: method must be \"mtp\" (the model's own MTP layer drafts) or \"dspark\" "
                   "(a DSpark checkpoint's drafter)");
    return 0;
  }
  *drafter = *method == "dspark" ? SchedulerOptions::Drafter::kDSpark : SchedulerOptions::Drafter::kMtp;
  if (const auto t = j.find("confidence_threshold"); t != j.end()) {
    if (*drafter != SchedulerOptions::Drafter::kDSpark || !t->is_number() || *t < 0.0 || *t > 1.0) {
      args.set_error("--speculative-config: confidence_threshold is a number from 0 to 1 for the dspark method "
                     "(drafts are verified up to the first whose confidence is below it)");
      return 0;
    }
    sched->confidence_threshold = t->get<float>();
  }
  const auto k = j.find("num_speculative_tokens");
  if (k == j.end() || !k->is_number_integer() || *k < 1 || *k > kMaxDraftTokens) {
    args.set_error("--speculative-config: num_speculative_tokens must be an integer from 1 to " +
                   std::to_string(kMaxDraftTokens));
    return 0;
  }
  return k->get<int>();
}

}  // namespace

const char* kEngineHelp =
    "engine:\n"
    "  --max-num-seqs N             requests running at once (default 64)\n"
    "  --max-num-batched-tokens N   tokens in one step (default 2048)\n"
    "  --max-model-len N            context limit per request (default: the model's)\n"
    "  --long-prefill-token-threshold N  most prompt tokens of one request per step\n"
    "  --block-size N               raw tokens per KV page (default 32)\n"
    "  --kv-cache-memory BYTES      KV cache budget of the process (shared by its ranks), e.g. 512M or 2G\n"
    "  --kv-cache-memory-fraction F share of available memory when no budget is given (default 0.25)\n"
    "  --speculative-config JSON    speculative decoding, e.g. '{\"method\":\"mtp\",\"num_speculative_tokens\":3}'\n"
    "                               (method mtp: the MTP layer drafts; dspark: a DSpark checkpoint's drafter)\n"
    "                               (1 to 7 draft tokens per step; greedy output is unchanged, sampled\n"
    "                               output keeps its distribution)\n"
    "  --enable-prefix-caching / --no-enable-prefix-caching\n"
    "                               reuse the caches of 128-token blocks earlier requests computed\n"
    "                               (default on)\n";

const char* kNumericsHelp =
    "  --numerics exact|fast        fast: FMA and any summation order, within the golden bounds of a\n"
    "                               correct implementation, batch-invariant; exact: every tensor as the\n"
    "                               reference computes it, bit for bit (DSV4_NUMERICS sets the default)\n";

const char* kParallelHelp =
    "parallel ranks (threads of this process; mpirun with --dist mpi for serve):\n"
    "  --tp N --dp N --ep N         TP x DP ranks; heads, wo_b, the shared expert and the vocabulary over\n"
    "                               each TP group, one cache partition per DP group, the routed experts\n"
    "                               over EP ranks (default: every rank). Canonical: --tp 4 --dp 4 --ep 16\n"
    "  --enable-flashcomm1          sequence-parallel prefill (the residual stream split over TP)\n"
    "  --flashcomm1-sp-min-token-num N  in steps of at least N tokens (default 1000)\n"
    "  --numa auto|off              auto (default): on several NUMA nodes, one rank a node (TP across\n"
    "                               them unless --tp/--dp say otherwise), pinned to its cores\n";

const char* kSamplingHelp =
    "sampling:\n"
    "  --temperature F --top-p F --top-k N --min-p F --seed N\n"
    "  --presence-penalty F --frequency-penalty F --repetition-penalty F\n"
    "  --max-tokens N --stop TEXT (repeatable) --ignore-eos\n";

std::set<std::string> engine_option_names() {
  return {"max-num-seqs", "max-num-batched-tokens", "max-model-len", "long-prefill-token-threshold", "block-size",
          "kv-cache-memory", "kv-cache-memory-fraction", "speculative-config", "numerics"};
}

kernels::Numerics numerics_option(Args& args, kernels::Numerics fallback) {
  kernels::Numerics n = kernels::numerics_from_env(fallback);
  if (args.has("numerics") && !kernels::parse_numerics(args.get("numerics"), &n))
    args.set_error("--numerics must be exact or fast, got '" + args.get("numerics") + "'");
  return n;
}

std::set<std::string> engine_flag_names() { return {"enable-prefix-caching", "no-enable-prefix-caching"}; }

std::set<std::string> parallel_option_names() { return {"tp", "dp", "ep", "flashcomm1-sp-min-token-num", "numa"}; }
std::set<std::string> parallel_flag_names() { return {"enable-flashcomm1"}; }

ParallelOptions parallel_options(Args& args) {
  ParallelOptions p;
  p.topology.tp = static_cast<int>(args.get_int("tp", 1));
  p.topology.dp = static_cast<int>(args.get_int("dp", 1));
  p.topology.ep = static_cast<int>(args.get_int("ep", 0));
  p.flashcomm.enabled = args.has("enable-flashcomm1");
  p.flashcomm.min_tokens = args.get_int("flashcomm1-sp-min-token-num", p.flashcomm.min_tokens);
  if (p.flashcomm.min_tokens < 1) args.set_error("--flashcomm1-sp-min-token-num must be at least 1");
  return p;
}

Status place_on_this_machine(Args& args, ParallelOptions* p) {
  NumaMode mode = NumaMode::kAuto;
  if (!parse_numa_mode(args.get("numa", "auto"), &mode))
    return invalid_argument("--numa must be auto or off, got '" + args.get("numa") + "'");
  DSV4_ASSIGN_OR_RETURN(MachineTopology machine, MachineTopology::detect());
  DSV4_ASSIGN_OR_RETURN(NumaPlacement placed, place_ranks(machine, mode, p->topology));
  log_info("machine: " + machine.describe() + "; placement: " + placed.describe());
  if (!placed.pinned()) return Status::Ok();
  p->topology = placed.layout;
  p->placement = placed.ranks;
  return Status::Ok();
}

std::set<std::string> sampling_option_names() {
  return {"temperature", "top-p", "top-k", "min-p", "seed", "presence-penalty", "frequency-penalty",
          "repetition-penalty", "max-tokens", "stop"};
}

EngineOptions engine_options(Args& args) {
  EngineOptions o;
  o.scheduler.max_num_seqs = args.get_int("max-num-seqs", o.scheduler.max_num_seqs);
  o.scheduler.max_num_batched_tokens = args.get_int("max-num-batched-tokens", o.scheduler.max_num_batched_tokens);
  o.scheduler.max_model_len = args.get_int("max-model-len", 0);
  o.scheduler.long_prefill_token_threshold = args.get_int("long-prefill-token-threshold", 0);
  o.scheduler.num_speculative_tokens = speculative_tokens(args, &o.scheduler);
  o.cache.block_size = args.get_int("block-size", o.cache.block_size);
  if (args.has("enable-prefix-caching") && args.has("no-enable-prefix-caching"))
    args.set_error("give --enable-prefix-caching or --no-enable-prefix-caching, not both");
  o.cache.enable_prefix_caching = !args.has("no-enable-prefix-caching");
  if (args.has("kv-cache-memory")) {
    o.cache.memory_bytes = parse_bytes(args, "kv-cache-memory");
    if (o.cache.memory_bytes <= 0) args.set_error("--kv-cache-memory needs a size such as 512M or 2G");
  }
  bool bad = false;
  o.cache.memory_fraction = parse_double(args, "kv-cache-memory-fraction", o.cache.memory_fraction, &bad);
  if (bad || o.cache.memory_fraction <= 0 || o.cache.memory_fraction > 1)
    args.set_error("--kv-cache-memory-fraction needs a number in (0, 1]");
  return o;
}

SamplingParams sampling_params(Args& args, const SamplingParams& defaults) {
  SamplingParams p = defaults;
  bool bad = false;
  p.temperature = static_cast<float>(parse_double(args, "temperature", p.temperature, &bad));
  p.top_p = static_cast<float>(parse_double(args, "top-p", p.top_p, &bad));
  p.min_p = static_cast<float>(parse_double(args, "min-p", p.min_p, &bad));
  p.presence_penalty = static_cast<float>(parse_double(args, "presence-penalty", p.presence_penalty, &bad));
  p.frequency_penalty = static_cast<float>(parse_double(args, "frequency-penalty", p.frequency_penalty, &bad));
  p.repetition_penalty = static_cast<float>(parse_double(args, "repetition-penalty", p.repetition_penalty, &bad));
  if (bad) args.set_error("a sampling option needs a number");
  p.top_k = static_cast<int>(args.get_int("top-k", p.top_k));
  p.max_tokens = args.get_int("max-tokens", p.max_tokens);
  if (args.has("seed")) p.seed = static_cast<uint64_t>(args.get_int("seed", 0));
  for (const std::string& s : args.all("stop")) p.stop.push_back(s);
  if (args.has("ignore-eos")) p.ignore_eos = true;
  return p;
}

}  // namespace dsv4::app
