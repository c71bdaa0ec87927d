// dsv4 verify: the golden protocol, for people checking a checkpoint.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "args.h"
#include "model/deepseek_v4.h"
#include "model/golden_verify.h"
#include "runtime/parallel_verify.h"

namespace dsv4::app {

int self_check(int chunk);  // cmd_verify_self.cc
// cmd_verify_mpi.cc; split_heads: tensor parallelism over the processes too
int verify_over_mpi(int argc, char** argv, const std::string& dir, const std::string& golden, int chunk, bool split_heads);

namespace {

const char* kHelp =
    "usage: dsv4 verify --model DIR [--golden FILE] [--chunk N] [--dump OUT]\n"
    "  --model DIR    checkpoint directory (config.json + safetensors)\n"
    "  --golden FILE  reference outputs (default: DIR/golden.safetensors)\n"
    "  --chunk N      prefill in chunks of N tokens (default: whole prompt)\n"
    "  --dump OUT     write every computed tensor to OUT (F32 safetensors)\n"
    "  --tp N         split the attention heads over N ranks (threads), each loading only its share\n"
    "  --ep N         spread the routed experts over N ranks (default: the --tp ranks)\n"
    "  --dist mpi     one rank per MPI process instead (mpirun -np N dsv4 verify --dist mpi ...):\n"
    "                 the experts spread over the N processes (and the heads with --tp N); rank 0 reports\n"
    "Without --model: self-check of the embedded default model (whole-prompt\n"
    "prefill against chunked and token-by-token prefill).\n"
    "Exit code 0: every bound holds; 1: a bound is broken; 2: bad input.\n";

// case.json beside the golden says whether the weights were FP8.
bool case_says_quantized(const std::string& golden, bool fallback) {
  auto path = std::filesystem::path(golden).parent_path() / "case.json";
  std::ifstream in(path);
  if (!in) return fallback;
  try {
    nlohmann::json j;
    in >> j;
    if (j.contains("weights") && j["weights"].is_string()) return j["weights"].get<std::string>() != "bf16";
  } catch (const std::exception&) {
  }
  return fallback;
}

}  // namespace

int cmd_verify(int argc, char** argv) {
  Args args(argc, argv, 2, {"model", "golden", "chunk", "dump", "ep", "tp", "dist"}, {"help"});
  long chunk = args.get_int("chunk", 0);
  const long tp = args.get_int("tp", 1);
  const long ep = args.get_int("ep", tp);  // experts over the same ranks by default
  if (args.has("help")) {
    std::fputs(kHelp, stdout);
    return 0;
  }
  if (!args.ok() || chunk < 0 || ep < 1 || tp < 1) {
    std::fprintf(stderr, "dsv4 verify: %s\n%s",
                 !args.ok() ? args.error().c_str() : chunk < 0 ? "--chunk must be >= 0" : "--tp and --ep must be at least 1", kHelp);
    return 2;
  }
  if (!args.has("model")) return self_check(static_cast<int>(chunk));
  const std::string dist = args.get("dist", "local");
  if (dist != "local" && dist != "mpi") {
    std::fprintf(stderr, "dsv4 verify: --dist must be local or mpi, got '%s'\n", dist.c_str());
    return 2;
  }
  if (dist == "mpi")
    return verify_over_mpi(argc, argv, args.get("model"), args.get("golden"), static_cast<int>(chunk), tp > 1);

  const std::string dir = args.get("model");
  auto t0 = std::chrono::steady_clock::now();
  auto model = DeepseekV4::load(dir);
  if (!model.ok()) {
    std::fprintf(stderr, "dsv4 verify: cannot load model: %s\n", model.status().message().c_str());
    return 2;
  }
  double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  VerifyOptions opt;
  opt.golden_path = args.get("golden", dir + "/golden.safetensors");
  opt.chunk = static_cast<int>(chunk);
  opt.dump_path = args.get("dump");
  opt.quantized = case_says_quantized(opt.golden_path, model_is_quantized(**model));
  std::printf("dsv4 verify\n  model   %s (%s)\n  weights %s, loaded in %.2fs\n  golden  %s\n  prefill %s\n",
              dir.c_str(), (*model)->config().summary().c_str(), opt.quantized ? "FP8/FP4" : "BF16/F32", load_s,
              opt.golden_path.c_str(), chunk > 0 ? ("chunks of " + std::to_string(chunk)).c_str() : "whole prompt");
  t0 = std::chrono::steady_clock::now();
  StatusOr<VerifyReport> report = Status(StatusCode::kInternal, "not run");
  if (ep > 1 || tp > 1) {
    auto par = verify_golden_parallel(dir, opt, {static_cast<int>(tp), static_cast<int>(ep)});
    if (par.ok()) {
      std::printf("  %d ranks (TP%ld, EP%ld): %.2f MiB of weights per rank, %.2f MiB on one rank\n", par->ranks, tp, ep,
                  par->weight_bytes_per_rank / 1048576.0, par->weight_bytes_single / 1048576.0);
      report = par->report;
    } else {
      report = par.status();
    }
  } else {
    report = verify_golden(**model, opt);
  }
  if (!report.ok()) {
    std::fprintf(stderr, "dsv4 verify: %s\n", report.status().message().c_str());
    return 2;
  }
  double run_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("  ran in %.2fs\n%s", run_s, report->format().c_str());
  if (!opt.dump_path.empty()) std::printf("computed tensors written to %s\n", opt.dump_path.c_str());
  return report->pass() ? 0 : 1;
}

}  // namespace dsv4::app
