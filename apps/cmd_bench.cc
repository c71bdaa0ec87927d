// dsv4 bench --topology: what a TP x DP x EP layout costs each rank. Loads
// the ranks (threads), prints each rank's resident weights against the
// ideal share (the replicated weights over TP plus its experts), and the
// bytes the ranks send in one prefill step and one decode step, with and
// without FlashComm1.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>

#include "checkpoint/model_loader.h"
#include "args.h"
#include "bench_serving.h"
#include "bench_front_end.h"
#include "bench_decode_roofline.h"
#include "bench_simulate.h"
#include "bench_throughput.h"
#include "engine_args.h"
#include "model_source.h"
#include "runtime/engine.h"
#include "runtime/local_executor.h"
#include "checkpoint/config_json.h"

namespace dsv4::app {
namespace {

const char* kHelp =
    "usage: dsv4 bench [--model DIR] [--ctx 1024,4096] [--batch 1,16] [--gen N] [--numerics M] [--csv FILE]\n"
    "                  [--peer-gguf FILE [--peer-harness PATH]]\n"
    "       dsv4 bench --topology [--model DIR] [--tp N --dp N --ep N] [--prompt-len N]\n"
    "                  [--flashcomm1-sp-min-token-num N]\n"
    "       dsv4 bench --serving [--model DIR] [--ctx 4096] [--gen N] [--k 1,3,7] [--csv FILE]\n"
    "       dsv4 bench --simulate cores=N[,nodes=N,bandwidth=GBPS,link=GBPS,job-us=US] [--model DIR] [--tp N --dp N]\n"
    "                  [--ctx N] [--gen N] [--batch 1,16] [--prompt-len N] [--numerics M] [--trace-step N]\n"
    "       dsv4 bench --soak [--host H] [--port P] [--duration S] [--clients N] [--seed S]\n"
    "       dsv4 bench --structured [--model DIR] [--tokenizer DIR] [--cases FILE] [--batch 16] [--gen 32]\n"
    "       dsv4 bench --front-end [--host H] [--port P] [--compare-port P2] [--parts LIST] [--idle N]\n"
    "                  [--slowloris N] [--samples N] [--clients N] [--duration S] [--streams N] [--stalled N]\n"
    "  (default)          prefill and decode throughput at each context length and batch size,\n"
    "                     measured incrementally (each row times only its own interval, after an\n"
    "                     untimed warm-up prefill chunk or decode step), KV bytes\n"
    "                     per token, and this machine's memory read bandwidth and the GEMM kernel's\n"
    "                     peak, with the decode roofline ratio, in exact and fast numerics side by\n"
    "                     side; each row's roofline per step (the weight and KV bytes it reads at\n"
    "                     the bandwidth measured next to it, its FLOPs at each kernel class's\n"
    "                     measured peak, the larger, and the share achieved); the time of each\n"
    "                     prefill row's last chunk (its longest context) and of a decode step by\n"
    "                     phase of the model; a table, and CSV with --csv\n"
    "  --numerics exact|fast  only that numerics (DSV4_NUMERICS too; the other modes run fast)\n"
    "  --ctx L1,L2,...    context lengths (default 1024,4096; at most the model's positions)\n"
    "  --batch B1,B2,...  decode batch sizes (default 1,16)\n"
    "  --gen N            decode steps timed per row (default 16)\n"
    "  --peer-gguf FILE   also time llama.cpp on the same weights, same rows and threads, and print\n"
    "                     dsv4 / llama.cpp ratios: FILE from dsv4 convert --to gguf --model DIR;\n"
    "                     the harness (default build/peer/llamacpp_bench) from peer/setup_llamacpp.sh\n"
    "  --topology         per-rank resident weights and communication per step of the layout\n"
    "  --serving          MTP (or DSpark) speculative decoding at each --k (mean accepted length, decode\n"
    "                     speed-up, same greedy tokens) on 8 held-out chat prompts, each to its end or\n"
    "                     --gen tokens (default 256; a model without a chat tokenizer: one random\n"
    "                     256-token prompt, --gen default 64), and time to first token at --ctx cold\n"
    "                     and after a prefix-cache hit on all but the last 64 tokens\n"
    "  --k K1,K2,...      draft tokens per step for --serving (default 1,3,7)\n"
    "  --simulate SPEC    the real forward on a simulated server (e.g. cores=128,nodes=2,bandwidth=400:\n"
    "                     2 NUMA nodes of 64 cores, 400 GB/s each; link=GBPS: between nodes, default 64):\n"
    "                     ranks placed as serve places them,\n"
    "                     each with a logical worker per core of its node; per phase of decode (each\n"
    "                     --batch after --ctx tokens, default 256) and of a --prompt-len prefill chunk\n"
    "                     (default 4096; 0: none): pool jobs, tiles, balance, weight bytes from each\n"
    "                     node and a projected tok/s against the roofline; checks the tokens against\n"
    "                     an unsimulated run (docs/simulation.md); --trace-step N also lists decode step\n"
    "                     N's jobs and the rank thread's serial spans in order (1: the first measured)\n"
    "  --soak             a mixed load against a running dsv4 serve (default 127.0.0.1:8000) for\n"
    "                     --duration seconds (default 180) from --clients threads (default 16): short\n"
    "                     and long prompts, streaming and not, chat, n=2, shared prefixes, abandoned\n"
    "                     streams; reports errors, lost requests, latency percentiles and whether\n"
    "                     page accounting returns to baseline; exit 0 only when all is clean\n"
    "  --structured       constrained decoding's cost: per case of --cases (default\n"
    "                     tests/js/structured_cases.json) the compile time and the time of each\n"
    "                     token's mask over random walks on the vocabulary of --tokenizer (a\n"
    "                     directory with tokenizer.json; default the model's, else byte-level), then\n"
    "                     the grammar's share of a --batch decode step against the batch unconstrained\n"
    "  --front-end        what clients can do to a running dsv4 serve (loopback): --idle idle (default\n"
    "                     10000) and --slowloris connections sending a header byte per second (2000)\n"
    "                     held open while new clients ask /health and one-token completions (--samples\n"
    "                     500: p50/p99, and the server's RSS per idle connection); --clients keep-alive\n"
    "                     clients (64) sending one-token completions for --duration s (15): requests/s,\n"
    "                     against --compare-port too (another server, e.g. an older dsv4) with the\n"
    "                     ratio; --streams readers (8) and --stalled streams never read (1000): engine\n"
    "                     steps/s before, while they are held and after they are cut, and their\n"
    "                     requests aborted with every page back. --parts connections,throughput,stalled\n"
    "                     picks parts (scripts/bench_front_end.sh starts the servers and runs it all)\n"
    "  --model DIR        checkpoint (default: the embedded default model). A DeepSeek-V4.1 checkpoint, or\n"
    "                     --model given more than once: decode at batch 1 after --ctx prompt tokens (default\n"
    "                     256) for --gen steps (default 8), each model against its memory roofline, side by\n"
    "                     side in one run (exact and fast numerics)\n"
    "  --prompt-len N     tokens each data-parallel group prefills in the measured step (default 1024)\n"
    "  --flashcomm1-sp-min-token-num N   FlashComm1 threshold for the 'on' rows (default: the prompt length)\n";

double mib(int64_t b) { return b / 1048576.0; }

struct StepTraffic {
  int64_t prefill = 0, decode = 0;  // bytes sent by all ranks
  int64_t prefill_calls = 0, decode_calls = 0;
};

int64_t total_bytes(const LocalExecutor& e, int64_t* calls) {
  int64_t bytes = 0;
  *calls = 0;
  for (const auto& t : e.traffic()) bytes += t.bytes, *calls += t.collectives;
  return bytes;
}

// One prefill step (a prompt per data-parallel group) and one decode step.
StatusOr<StepTraffic> measure(const std::string& dir, const ParallelOptions& p, int64_t prompt_len) {
  EngineOptions eo;
  eo.scheduler.max_num_seqs = 4;
  eo.scheduler.max_num_batched_tokens = prompt_len;
  eo.cache.memory_bytes = int64_t{256} << 20;
  DSV4_ASSIGN_OR_RETURN(ModelConfig config, load_model_config(dir + "/config.json"));
  if (prompt_len + 2 > config.max_position_embeddings)
    return invalid_argument("--prompt-len must be below the model's " + std::to_string(config.max_position_embeddings) +
                            " positions");
  eo.cache.memory_bytes *= static_cast<int64_t>(p.topology.tp) * p.topology.dp;
  DSV4_ASSIGN_OR_RETURN(KvCacheOptions cache, Engine::cache_options(config, eo));
  DSV4_ASSIGN_OR_RETURN(auto exec, LocalExecutor::create(dir, {}, p, cache));
  LocalExecutor* e = exec.get();
  DSV4_ASSIGN_OR_RETURN(auto engine, Engine::create(std::move(exec), eo.scheduler));
  std::mt19937 rng(7);
  SamplingParams greedy;
  greedy.temperature = 0;
  greedy.max_tokens = 2;
  greedy.ignore_eos = true;  // the decode traffic is measured, whatever the model says
  for (int g = 0; g < engine->num_groups(); ++g) {
    std::vector<int32_t> prompt(prompt_len);
    for (auto& t : prompt) t = static_cast<int32_t>(rng() % config.vocab_size);
    DSV4_RETURN_IF_ERROR(engine->add_request(prompt, greedy).status());
  }
  StepTraffic t;
  int64_t calls0 = 0, calls1 = 0, calls2 = 0;
  const int64_t b0 = total_bytes(*e, &calls0);
  engine->step();
  const int64_t b1 = total_bytes(*e, &calls1);
  engine->step();
  const int64_t b2 = total_bytes(*e, &calls2);
  t.prefill = b1 - b0;
  t.decode = b2 - b1;
  t.prefill_calls = calls1 - calls0;
  t.decode_calls = calls2 - calls1;
  return t;
}

// "1024,4096" -> {1024, 4096}; empty on a malformed list.
std::vector<int64_t> int_list(const std::string& s) {
  std::vector<int64_t> out;
  size_t at = 0;
  while (at <= s.size()) {
    const size_t comma = s.find(',', at);
    const std::string item = s.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    char* end = nullptr;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end || v < 1) return {};
    out.push_back(v);
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return out;
}

// Questions in phrasings the default model's training never used
// (train/data.py's held-out frames), in chat and thinking mode.
const std::pair<const char*, bool> kServingQuestions[] = {
    {"Could you figure out 482 + 371 for me?", false},
    {"Give me the value of 903 decreased by 458.", false},
    {"There are 275 birds on a tree and 148 more land on it. How many birds are on the tree?", false},
    {"Hello, who are you?", false},
    {"Could you figure out 482 + 371 for me?", true},
    {"A shop had 532 shirts and sold 178. How many shirts does it have left?", true},
    {"I'd like to know 64 less 29.", true},
    {"Work out 709 + 86 and tell me the result.", true},
};

// The chat turns bench --serving decodes for a model whose tokenizer has
// the chat markers (none for one without).
StatusOr<ServingPrompts> serving_prompts(const std::string& model, const ModelConfig& config) {
  std::string tokenizer_name;
  DSV4_ASSIGN_OR_RETURN(auto tokenizer, load_tokenizer(model, config.vocab_size, &tokenizer_name));
  ServingPrompts out;
  if (tokenizer->eos_id() < 0) return out;
  for (const auto& [question, thinking] : kServingQuestions) {
    DSV4_ASSIGN_OR_RETURN(std::vector<int32_t> ids, chat_turn_tokens(*tokenizer, config, question, thinking));
    out.prompts.push_back(std::move(ids));
  }
  out.chat = true;
  out.what = std::to_string(out.prompts.size()) + " held-out chat prompts (half in thinking mode)";
  return out;
}

}  // namespace

int bench_soak(const std::string& host, int port, double duration_s, int clients, uint64_t seed);  // bench_soak.cc

int bench_structured(const DeepseekV4& m, const std::string& name, const std::string& model_dir,
                     const std::string& tokenizer_dir, const std::string& cases_path, int64_t batch,
                     int64_t gen);  // bench_structured.cc

int cmd_bench(int argc, char** argv) {
  std::set<std::string> valued = {"model", "prompt-len", "ctx", "batch", "gen", "csv", "k",
                                  "host", "port", "duration", "clients", "seed", "numerics",
                                  "peer-gguf", "peer-harness", "tokenizer", "cases", "compare-port", "parts",
                                  "idle", "slowloris", "samples", "streams", "stalled", "simulate", "trace-step"};
  for (const auto& k : parallel_option_names()) valued.insert(k);
  Args args(argc, argv, 2, valued, {"help", "topology", "serving", "soak", "structured", "front-end"});
  if (args.has("help")) {
    std::fputs(kHelp, stdout);
    return 0;
  }
  if (args.has("soak")) {
    const long port = args.get_int("port", 8000), duration = args.get_int("duration", 180),
               clients = args.get_int("clients", 16), seed = args.get_int("seed", 1);
    if (args.ok() && (port < 1 || port > 65535 || duration < 1 || clients < 1 || clients > 1024))
      args.set_error("--soak needs a port, --duration >= 1 and --clients from 1 to 1024");
    if (!args.ok()) {
      std::fprintf(stderr, "dsv4 bench: %s\n%s", args.error().c_str(), kHelp);
      return 2;
    }
    return bench_soak(args.get("host", "127.0.0.1"), static_cast<int>(port), static_cast<double>(duration),
                      static_cast<int>(clients), static_cast<uint64_t>(seed));
  }
  if (args.has("front-end")) {
    FrontEndBenchOptions f;
    f.host = args.get("host", f.host);
    f.port = static_cast<int>(args.get_int("port", f.port));
    f.compare_port = static_cast<int>(args.get_int("compare-port", 0));
    f.parts = args.get("parts", f.parts);
    f.idle = static_cast<int>(args.get_int("idle", f.idle));
    f.slowloris = static_cast<int>(args.get_int("slowloris", f.slowloris));
    f.samples = static_cast<int>(args.get_int("samples", f.samples));
    f.clients = static_cast<int>(args.get_int("clients", f.clients));
    f.throughput_seconds = static_cast<double>(args.get_int("duration", static_cast<int64_t>(f.throughput_seconds)));
    f.streams = static_cast<int>(args.get_int("streams", f.streams));
    f.stalled = static_cast<int>(args.get_int("stalled", f.stalled));
    if (args.ok() && (f.port < 1 || f.port > 65535 || f.compare_port < 0 || f.compare_port > 65535))
      args.set_error("--port and --compare-port must be TCP ports");
    if (args.ok() && (f.idle < 0 || f.slowloris < 0 || f.samples < 1 || f.clients < 1 || f.clients > 1024 ||
                      f.throughput_seconds < 1 || f.streams < 1 || f.stalled < 0 || f.idle + f.slowloris > 60000))
      args.set_error("--front-end counts: --idle + --slowloris at most 60000, --samples, --streams >= 1, --clients 1 to 1024, "
                     "--duration >= 1");
    if (!args.ok()) {
      std::fprintf(stderr, "dsv4 bench: %s\n%s", args.error().c_str(), kHelp);
      return 2;
    }
    return bench_front_end(f);
  }
  ParallelOptions p = parallel_options(args);
  if (args.has("simulate")) {
    SimulateOptions s;
    s.model = args.get("model");
    s.asked = p.topology;
    s.numerics = numerics_option(args, kernels::Numerics::kFast);
    s.ctx = args.get_int("ctx", s.ctx);
    s.gen = args.get_int("gen", s.gen);
    s.chunk = args.get_int("prompt-len", s.chunk);
    s.trace_step = args.get_int("trace-step", 0);
    if (args.has("batch")) s.batches = int_list(args.get("batch"));
    if (Status st = parse_simulated_machine(args.get("simulate"), &s); args.ok() && !st.ok()) args.set_error(st.message());
    if (args.ok() && (s.ctx < 1 || s.gen < 1 || s.chunk < 0 || s.batches.empty() || s.trace_step < 0))
      args.set_error("--simulate needs --ctx and --gen of at least 1, --prompt-len and --trace-step of at least 0 "
                     "and --batch sizes");
    if (!args.ok()) {
      std::fprintf(stderr, "dsv4 bench: %s\n%s", args.error().c_str(), kHelp);
      return 2;
    }
    return bench_simulate(s);
  }
  // Throughput rows run exact and fast side by side unless --numerics (or
  // DSV4_NUMERICS) names one; the other modes run fast by default.
  const bool both = !args.has("numerics") && !std::getenv("DSV4_NUMERICS");
  ModelOptions mo;
  mo.numerics = numerics_option(args, kernels::Numerics::kFast);
  const int64_t prompt_len = args.get_int("prompt-len", 1024);
  const std::vector<int64_t> contexts = int_list(args.get("ctx", "1024,4096"));
  const std::vector<int64_t> batches = int_list(args.get("batch", "1,16"));
  const int64_t gen = args.get_int("gen", 16);
  if (args.ok() && contexts.empty()) args.set_error("--ctx needs positive lengths such as 1024,4096");
  if (args.ok() && batches.empty()) args.set_error("--batch needs positive sizes such as 1,16");
  if (args.ok() && gen < (args.has("structured") ? 0 : 1)) args.set_error("--gen must be at least 1");
  if (args.ok() && prompt_len < 1) args.set_error("--prompt-len must be at least 1");
  if (!args.ok()) {
    std::fprintf(stderr, "dsv4 bench: %s\n%s", args.error().c_str(), kHelp);
    return 2;
  }
  const int64_t threshold = args.get_int("flashcomm1-sp-min-token-num", prompt_len);
  // A DeepSeek-V4.1 checkpoint, or several models: decode against each
  // one's roofline, side by side.
  const std::vector<std::string> models = args.has("model") ? args.all("model") : std::vector<std::string>{""};
  bool v41 = false;
  for (const std::string& m : models)
    if (!m.empty()) {
      auto config = load_any_model_config(m + "/config.json");
      v41 |= config.ok() && config->family == ModelFamily::kV41;
    }
  if (v41 || models.size() > 1) {
    if (args.has("topology") || args.has("serving") || args.has("structured") || args.has("peer-gguf") ||
        args.has("batch") || args.has("csv")) {
      std::fprintf(stderr, "dsv4 bench: with a DeepSeek-V4.1 model or several --model, bench times decode at batch 1 "
                           "against each model's roofline (--ctx, --gen, --numerics); --topology, --serving, "
                           "--structured, --peer-gguf, --batch and --csv are for one DeepSeek-V4 model\n");
      return 2;
    }
    DecodeRooflineOptions d;
    d.models = models;
    d.numerics = both ? std::vector<kernels::Numerics>{kernels::Numerics::kExact, kernels::Numerics::kFast}
                      : std::vector<kernels::Numerics>{mo.numerics};
    d.ctx = args.has("ctx") ? contexts.front() : 256;
    d.gen = args.get_int("gen", 8);
    return bench_decode_roofline(d);
  }
  auto dir = ModelDir::open(args.get("model"));
  if (!dir.ok()) {
    std::fprintf(stderr, "dsv4 bench: %s\n", dir.status().message().c_str());
    return 2;
  }
  std::vector<int64_t> ks;
  if (args.has("serving")) {
    ks = int_list(args.get("k", "1,3,7"));
    if (ks.empty() || *std::max_element(ks.begin(), ks.end()) > kMaxDraftTokens) {
      std::fprintf(stderr, "dsv4 bench: --k needs draft counts from 1 to %d, such as 1,3,7\n", kMaxDraftTokens);
      return 2;
    }
  }
  const auto load_start = std::chrono::steady_clock::now();
  auto one = load_deepseek_v4(dir->path(), mo);
  const double load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();
  if (!one.ok()) {
    std::fprintf(stderr, "dsv4 bench: %s\n", one.status().message().c_str());
    return 2;
  }
  keep_step_memory();
  if (args.has("serving")) {
    auto prompts = serving_prompts(args.get("model"), (*one)->config());
    if (!prompts.ok()) {
      std::fprintf(stderr, "dsv4 bench: %s\n", prompts.status().message().c_str());
      return 2;
    }
    const int64_t gen = args.get_int("gen", prompts->chat ? 256 : 64);
    // 4096 or what the model's positions leave after gen and the drafts
    const int64_t ctx = args.get_int(
        "ctx", std::min<int64_t>(4096, (*one)->config().max_position_embeddings - gen - kMaxDraftTokens - 1));
    return bench_serving(**one, model_name(args.get("model")), *prompts, ctx, gen, ks, args.get("csv"));
  }
  if (args.has("structured"))
    return bench_structured(**one, model_name(args.get("model")), args.get("model"), args.get("tokenizer"),
                            args.get("cases", "tests/js/structured_cases.json"), args.has("batch") ? batches[0] : 16,
                            args.get_int("gen", 32));
  if (!args.has("topology")) {
    ThroughputOptions t;
    t.name = model_name(args.get("model"));
    t.numerics = both ? std::vector<kernels::Numerics>{kernels::Numerics::kExact, kernels::Numerics::kFast}
                      : std::vector<kernels::Numerics>{mo.numerics};
    t.contexts = contexts;
    t.batches = batches;
    t.gen = gen;
    t.csv = args.get("csv");
    t.peer_gguf = args.get("peer-gguf");
    t.peer_harness = args.get("peer-harness");
    t.load_seconds = load_seconds;
    return bench_throughput(**one, t);
  }

  // Weights: every rank's against the ideal share.
  KvCacheOptions cache;
  cache.memory_bytes = int64_t{64} << 20;
  cache.max_num_seqs = 4;
  cache.memory_bytes *= static_cast<int64_t>(p.topology.tp) * p.topology.dp;
  auto ranks = LocalExecutor::create(dir->path(), mo, p, cache);
  if (!ranks.ok()) {
    std::fprintf(stderr, "dsv4 bench: %s\n", ranks.status().message().c_str());
    return 2;
  }
  const Topology t = (*ranks)->topology();  // a copy: the ranks are released below
  const int64_t total = (*one)->weights().resident_bytes(), experts = (*one)->weights().routed_expert_bytes();
  const int64_t replicated = total - experts;
  const double ideal = static_cast<double>(replicated) / t.tp + static_cast<double>(experts) / t.ep;
  std::printf("dsv4 bench --topology: %s on %s\n", model_name(args.get("model")).c_str(), t.describe().c_str());
  std::printf("weights (f32 resident): one rank holds %.2f MiB = %.2f MiB replicated-type + %.2f MiB routed experts\n",
              mib(total), mib(replicated), mib(experts));
  std::printf("  ideal per rank = replicated / TP%d + experts / EP%d = %.2f MiB\n", t.tp, t.ep, ideal / 1048576.0);
  std::printf("  %4s %3s %3s %3s %10s %10s %9s %8s\n", "rank", "tp", "dp", "ep", "MiB", "experts", "vs ideal", "vs one");
  for (int r = 0; r < t.world; ++r) {
    const ModelWeights& w = (*ranks)->model(r).weights();
    std::printf("  %4d %3d %3d %3d %10.2f %10.2f %8.2fx %7.3fx\n", r, t.tp_rank(r), t.dp_rank(r), t.ep_rank(r),
                mib(w.resident_bytes()), mib(w.routed_expert_bytes()), w.resident_bytes() / ideal,
                static_cast<double>(w.resident_bytes()) / total);
  }
  ranks->reset();

  // Communication per step.
  std::printf("communication per step, bytes sent by all %d ranks (each collective as its direct algorithm moves it):\n",
              t.world);
  std::printf("  %-22s %16s %12s %16s %12s\n", "", "prefill", "collectives", "decode", "collectives");
  for (bool fc : {false, true}) {
    ParallelOptions q = p;
    q.flashcomm = {fc, threshold};
    auto m = measure(dir->path(), q, prompt_len);
    if (!m.ok()) {
      std::fprintf(stderr, "dsv4 bench: %s\n", m.status().message().c_str());
      return 2;
    }
    const std::string label = fc ? "FlashComm1 on (>= " + std::to_string(threshold) + ")" : "FlashComm1 off";
    std::printf("  %-22s %13.2f MiB %12lld %13.3f MiB %12lld\n", label.c_str(), mib(m->prefill),
                static_cast<long long>(m->prefill_calls), mib(m->decode) , static_cast<long long>(m->decode_calls));
  }
  std::printf("  (prefill: %lld tokens in each of %d data-parallel groups; decode: one token per group)\n",
              static_cast<long long>(prompt_len), t.dp);
  return 0;
}

}  // namespace dsv4::app
