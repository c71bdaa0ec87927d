// dsv4 plan: will it fit, and how fast can it decode? From config.json alone.
#include <cstdio>
#include <filesystem>

#include "args.h"
#include "checkpoint/config_json.h"
#include "checkpoint/released_configs.h"
#include "dist/numa_placement.h"
#include "engine_args.h"
#include "tools/capacity_plan.h"

namespace dsv4::app {
namespace {

const char* kHelp =
    "usage: dsv4 plan --config PATH_OR_DIR|flash|pro|v41-flash [--tp N --dp N --ep N] [--memory 512G]\n"
    "                 [--max-model-len N] [--bandwidth 400G] [--weights released|bf16]\n"
    "                 [--sockets S --numa-nodes N --cores C [--numa auto|off]] [engine options]\n"
    "Prints, before anything is downloaded, what the model needs on a layout: per-rank resident\n"
    "weights by format (as dsv4 loads them), the KV cache's bytes per token, how many tokens of\n"
    "history and how many requests of max-model-len fit in the memory left, and the batch-1\n"
    "decode roofline for a memory bandwidth. The numbers are the ones the engine computes.\n"
    "Exit code 0: it fits; 1: the weights do not fit in --memory; 2: bad input.\n"
    "  --config          a config.json, a checkpoint directory holding one, or flash / pro /\n"
    "                    v41-flash (the released DeepSeek-V4-Flash / -Pro / V4.1-Flash configs);\n"
    "                    V4.1's Engram tables are counted once per machine\n"
    "  --memory          the machine's memory (K, M, G, T: powers of 1024); the KV budget is what\n"
    "                    the weights and a headroom of 5% (at least 2 GiB) leave, or --kv-cache-memory\n"
    "  --bandwidth       memory read bandwidth, bytes/s (G = 10^9: 400G is 400 GB/s)\n"
    "  --weights         released (FP8 blocks, FP4 experts, BF16 embedding and head; default) or\n"
    "                    bf16 (every linear in BF16, as dsv4 mkmodel writes by default)\n"
    "  --sockets, --numa-nodes, --cores   a machine to place the ranks on (counts in all: 2, 2,\n"
    "                    128 is two sockets of 64 cores): with --numa auto (default) one rank a\n"
    "                    NUMA node, tensor parallel across them unless --tp/--dp say otherwise,\n"
    "                    each on its node's cores; the plan is then per rank of that layout\n"
    "  --numa            auto or off (off: the layout asked, unplaced)\n"
    "  --node-bandwidth  with a machine: each NUMA node's memory bandwidth (G = 10^9); the roofline\n"
    "                    takes all the nodes' (each rank reads its share from its own node)\n"
    "  --max-num-seqs, --max-num-batched-tokens, --max-model-len, --block-size,\n"
    "  --kv-cache-memory, --[no-]enable-prefix-caching, --speculative-config: as dsv4 serve\n";

StatusOr<ModelConfig> config_from(const std::string& where) {
  if (where == "flash" || where == "pro" || where == "v41-flash") return released_config(where);
  std::string path = where;
  if (std::filesystem::is_directory(path)) path += "/config.json";
  return load_any_model_config(path);
}

}  // namespace

int cmd_plan(int argc, char** argv) {
  std::set<std::string> valued = engine_option_names();
  for (const auto& n : parallel_option_names()) valued.insert(n);
  for (const char* n :
       {"config", "memory", "bandwidth", "weights", "sockets", "numa-nodes", "cores", "numa", "node-bandwidth"})
    valued.insert(n);
  std::set<std::string> flags = engine_flag_names();
  flags.insert("help");
  Args args(argc, argv, 2, valued, flags);
  if (args.has("help")) {
    std::fputs(kHelp, stdout);
    return 0;
  }
  EngineOptions engine = engine_options(args);
  const ParallelOptions parallel = parallel_options(args);
  PlanOptions o;
  o.topology = parallel.topology;
  o.numerics = numerics_option(args, kernels::Numerics::kFast);  // as dsv4 serve loads it
  const std::string weights = args.get("weights", "released");
  if (weights != "released" && weights != "bf16") args.set_error("--weights must be released or bf16");
  o.weights = weights == "bf16" ? PlanWeights::kBf16 : PlanWeights::kReleased;
  if (!args.ok() || !args.has("config")) {
    std::fprintf(stderr, "dsv4 plan: %s\n%s", args.ok() ? "--config is required" : args.error().c_str(), kHelp);
    return 2;
  }
  auto size = [&](const char* key, bool decimal) -> int64_t {
    if (!args.has(key)) return 0;
    auto v = parse_byte_size(args.get(key), decimal);
    if (!v.ok()) {
      std::fprintf(stderr, "dsv4 plan: --%s: %s\n", key, v.status().message().c_str());
      return -1;
    }
    return *v;
  };
  o.memory_bytes = size("memory", false);
  o.bandwidth = static_cast<double>(size("bandwidth", true));
  if (o.memory_bytes < 0 || o.bandwidth < 0) return 2;
  // A machine given by its counts: the ranks placed on its NUMA nodes.
  std::string placement;
  if (args.has("sockets") || args.has("numa-nodes") || args.has("cores")) {
    const int sockets = args.get_int("sockets", 1), nodes = args.get_int("numa-nodes", sockets);
    NumaMode mode = NumaMode::kAuto;
    if (!parse_numa_mode(args.get("numa", "auto"), &mode)) {
      std::fprintf(stderr, "dsv4 plan: --numa must be auto or off, got '%s'\n", args.get("numa").c_str());
      return 2;
    }
    auto machine = MachineTopology::description_of(sockets, nodes, args.get_int("cores", nodes));
    auto m = machine.ok() ? MachineTopology::synthetic(*machine) : StatusOr<MachineTopology>(machine.status());
    auto placed = m.ok() ? place_ranks(*m, mode, o.topology) : StatusOr<NumaPlacement>(m.status());
    if (!placed.ok()) {
      std::fprintf(stderr, "dsv4 plan: %s\n", placed.status().message().c_str());
      return 2;
    }
    o.topology = placed->layout;
    placement = "machine: " + m->describe() + "\nplacement: " + placed->describe() + "\n";
    const int64_t per_node = size("node-bandwidth", true);
    if (per_node < 0) return 2;
    if (per_node > 0) o.bandwidth = static_cast<double>(per_node) * nodes;
  } else if (args.has("node-bandwidth")) {
    std::fprintf(stderr, "dsv4 plan: --node-bandwidth goes with a machine (--sockets, --numa-nodes, --cores)\n");
    return 2;
  }
  auto config = config_from(args.get("config"));
  if (!config.ok()) {
    std::fprintf(stderr, "dsv4 plan: %s\n", config.status().message().c_str());
    return 2;
  }
  auto cache = Engine::cache_options(*config, engine);
  if (!cache.ok()) {
    std::fprintf(stderr, "dsv4 plan: %s\n", cache.status().message().c_str());
    return 2;
  }
  o.cache = *cache;
  o.kv_cache_bytes = cache->memory_bytes;
  o.max_model_len = engine.scheduler.max_model_len;
  auto plan = plan_capacity(*config, o);
  if (!plan.ok()) {
    std::fprintf(stderr, "dsv4 plan: %s\n", plan.status().message().c_str());
    return 2;
  }
  std::printf("dsv4 plan: %s%s\n", args.get("config").c_str(),
              o.memory_bytes ? (" on " + std::to_string(o.memory_bytes >> 30) + " GiB").c_str() : "");
  std::fputs(placement.c_str(), stdout);
  std::fputs(plan->report().c_str(), stdout);
  return plan->fits ? 0 : 1;
}

}  // namespace dsv4::app
