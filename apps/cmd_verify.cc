// dsv4 verify: the golden protocol, for people checking a checkpoint.
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "checkpoint/model_loader.h"
#include "args.h"
#include "model_source.h"
#include "engine_args.h"
#include "kernels/dispatch.h"
#include "model/deepseek_v4.h"
#include "tools/dspark_verify.h"
#include "tools/golden_verify.h"
#include "tools/v41_golden_verify.h"
#include "checkpoint/v41_loader.h"
#include "checkpoint/config_json.h"
#include "tools/parallel_verify.h"

namespace dsv4::app {

int self_check(const std::string& dir, int chunk, long prompt_len, kernels::Numerics numerics);  // cmd_verify_self.cc
// cmd_verify_mpi.cc: the same over MPI processes
int verify_over_mpi(int argc, char** argv, const std::string& dir, const std::string& golden, int chunk,
                    const ParallelVerifyOptions& parallel);

namespace {

const char* kHelp =
    "usage: dsv4 verify --model DIR [--golden FILE] [--chunk N] [--dump OUT]\n"
    "  --model DIR    checkpoint directory (config.json + safetensors)\n"
    "  --golden FILE  reference outputs (default: DIR/golden.safetensors)\n"
    "  --chunk N      prefill in chunks of N tokens (default: whole prompt)\n"
    "  --dump OUT     write every computed tensor to OUT (F32 safetensors)\n"
    "  --tp N --dp N --ep N\n"
    "                 run on tp x dp ranks (threads): heads, output groups, wo_b, the shared\n"
    "                 expert and the vocabulary split over each TP group, the prompts over the\n"
    "                 DP groups, the routed experts over EP ranks (default: every rank);\n"
    "                 DeepSeek-V4.1: --dp and --ep only, every DP group running every prompt\n"
    "  --enable-flashcomm1, --flashcomm1-sp-min-token-num N\n"
    "                 sequence-parallel prefill in steps of at least N tokens (default 1000)\n"
    "  --dist mpi     one rank per MPI process instead of threads\n"
    "                 (mpirun -np TPxDP dsv4 verify --dist mpi ...); rank 0 reports\n"
    "  --numerics exact|fast\n"
    "                 exact (default): every tensor must match the reference bit for bit;\n"
    "                 fast: within the case's bounds for any correct implementation\n"
    "                 (case.json); DSV4_NUMERICS sets the default\n"
    "  --self-check   no golden: whole-prompt prefill of three packed prompts against\n"
    "                 chunked (1, 7, 64 or --chunk) and token-by-token prefill, then greedy\n"
    "                 decoding (the shortest across the sliding window); the model's own\n"
    "                 results must agree bit for bit\n"
    "  --prompt-len N the self-check's longest prompt (default: past the window and two\n"
    "                 windows of the largest compress ratio)\n"
    "Without --model: that self-check on the embedded default model.\n"
    "Exit code 0: every bound holds; 1: a bound is broken; 2: bad input.\n";

}  // namespace

// A DSpark case (../shared/golden/DSPARK.md): both protocols, each with its
// bounds; the end-to-end one's tensors go to --dump. On a TP x EP layout
// (parallel) the ranks are threads that load their own shares.
// A DeepSeek-V4.1 golden case (tests/golden_v41), on one rank or on
// tensor-, data- and expert-parallel ranks (threads), each data-parallel
// group running every prompt; fast numerics against the case's bounds.
static int verify_v41_case(const std::string& dir, const std::string& golden, int64_t chunk,
                           const ParallelVerifyOptions* parallel, kernels::Numerics numerics) {
  auto bounds = GoldenBounds::for_run(golden, numerics, /*w8a8=*/false);
  if (!bounds.ok()) {
    std::fprintf(stderr, "dsv4 verify: %s\n", bounds.status().message().c_str());
    return 2;
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto model = load_deepseek_v41(dir, {}, {}, numerics);
  if (!model.ok()) {
    std::fprintf(stderr, "dsv4 verify: cannot load model: %s\n", model.status().message().c_str());
    return 2;
  }
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("dsv4 verify\n  model   %s (%s)\n  loaded in %.2fs, %.2f MiB resident; kernels %s, numerics %s\n"
              "  golden  %s\n  prefill %s\n",
              dir.c_str(), (*model)->config().summary().c_str(), load_s,
              (*model)->weights().resident_bytes() / 1048576.0, kernels::isa_name(kernels::active_isa()),
              kernels::numerics_name(numerics), golden.c_str(),
              chunk > 0 ? ("chunks of " + std::to_string(chunk)).c_str() : "whole prompt");
  const V41VerifyOptions options{golden, chunk, false, *bounds};
  StatusOr<VerifyReport> report = Status(StatusCode::kInternal, "not run");
  if (parallel) {
    auto run = verify_v41_golden_parallel(dir, options, *parallel);
    if (run.ok()) {
      std::printf("  %s, every data-parallel group running every prompt: %.2f MiB of weights per rank (at most), "
                  "%.2f MiB on one rank\n",
                  run->topology.describe().c_str(), run->weight_bytes_per_rank / 1048576.0,
                  run->weight_bytes_single / 1048576.0);
      if (parallel->flashcomm.enabled)
        std::printf("  FlashComm1: %lld forwards over all ranks held the residual stream split by rows\n",
                    static_cast<long long>(run->flashcomm_forwards));
      report = run->report;
    } else {
      report = run.status();
    }
  } else {
    report = verify_v41_golden(**model, options);
  }
  if (!report.ok()) {
    std::fprintf(stderr, "dsv4 verify: %s\n", report.status().message().c_str());
    return 2;
  }
  std::printf("%s", report->format().c_str());
  return report->pass() ? 0 : 1;
}

static int verify_dspark_case(const DeepseekV4& model, const std::string& dir, const VerifyOptions& opt,
                              const ParallelVerifyOptions* parallel, double load_s) {
  std::printf("dsv4 verify (DSpark drafter)\n  model   %s (%s)\n  loaded in %.2fs; kernels %s, numerics %s\n  golden  %s\n",
              dir.c_str(), model.config().summary().c_str(), load_s, kernels::isa_name(kernels::active_isa()),
              kernels::numerics_name(model.numerics()), opt.golden_path.c_str());
  if (parallel)
    std::printf("  layout  TP%d x EP%d, ranks as threads\n", parallel->topology.tp,
                parallel->topology.ep > 0 ? parallel->topology.ep : parallel->topology.tp);
  bool pass = true;
  for (bool end_to_end : {false, true}) {
    DSparkVerifyOptions o;
    o.golden_path = opt.golden_path;
    o.end_to_end = end_to_end;
    o.chunk = opt.chunk;
    if (end_to_end) o.dump_path = opt.dump_path;
    const auto t0 = std::chrono::steady_clock::now();
    auto report = parallel ? verify_dspark_parallel(dir, o, *parallel) : verify_dspark(model, o);
    if (!report.ok()) {
      std::fprintf(stderr, "dsv4 verify: %s\n", report.status().message().c_str());
      return 2;
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%s (%.2fs)\n%s", end_to_end ? "end to end: the target's own taps" : "drafter fed the golden taps", s,
                report->format().c_str());
    pass &= report->pass();
  }
  if (!opt.dump_path.empty()) std::printf("computed tensors (end to end) written to %s\n", opt.dump_path.c_str());
  return pass ? 0 : 1;
}

int cmd_verify(int argc, char** argv) {
  Args args(argc, argv, 2,
            {"model", "golden", "chunk", "dump", "ep", "tp", "dp", "dist", "flashcomm1-sp-min-token-num", "numerics",
             "prompt-len"},
            {"help", "enable-flashcomm1", "self-check"});
  long chunk = args.get_int("chunk", 0), prompt_len = args.get_int("prompt-len", 0);
  ParallelVerifyOptions par;
  par.topology.tp = static_cast<int>(args.get_int("tp", 1));
  par.topology.dp = static_cast<int>(args.get_int("dp", 1));
  par.topology.ep = static_cast<int>(args.get_int("ep", 0));
  par.flashcomm.enabled = args.has("enable-flashcomm1");
  par.flashcomm.min_tokens = args.get_int("flashcomm1-sp-min-token-num", 1000);
  par.numerics = numerics_option(args, kernels::Numerics::kExact);
  if (args.has("help")) {
    std::fputs(kHelp, stdout);
    return 0;
  }
  if (!args.ok() || chunk < 0 || prompt_len < 0 || par.flashcomm.min_tokens < 1) {
    std::fprintf(stderr, "dsv4 verify: %s\n%s",
                 !args.ok() ? args.error().c_str()
                 : chunk < 0 || prompt_len < 0 ? "--chunk and --prompt-len must be >= 0"
                             : "--flashcomm1-sp-min-token-num must be at least 1",
                 kHelp);
    return 2;
  }
  if (!args.has("model") || args.has("self-check"))
    return self_check(args.get("model"), static_cast<int>(chunk), prompt_len, par.numerics);
  const std::string dist = args.get("dist", "local");
  if (dist != "local" && dist != "mpi") {
    std::fprintf(stderr, "dsv4 verify: --dist must be local or mpi, got '%s'\n", dist.c_str());
    return 2;
  }
  if (dist == "mpi") return verify_over_mpi(argc, argv, args.get("model"), args.get("golden"), static_cast<int>(chunk), par);
  const bool parallel = par.topology.tp * par.topology.dp > 1 || par.topology.ep > 1;

  // A checkpoint directory, or an embedded model written out for the run.
  auto source = ModelDir::open(args.get("model"));
  if (!source.ok()) {
    std::fprintf(stderr, "dsv4 verify: %s\n", source.status().message().c_str());
    return 2;
  }
  const std::string dir = source->path();
  if (auto config = load_any_model_config(dir + "/config.json"); config.ok() && config->family == ModelFamily::kV41)
    return verify_v41_case(dir, args.get("golden", dir + "/golden.safetensors"), chunk, parallel ? &par : nullptr,
                           par.numerics);
  auto t0 = std::chrono::steady_clock::now();
  ModelOptions mo;
  mo.numerics = par.numerics;
  auto model = load_deepseek_v4(dir, mo);
  if (!model.ok()) {
    std::fprintf(stderr, "dsv4 verify: cannot load model: %s\n", model.status().message().c_str());
    return 2;
  }
  double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  VerifyOptions opt;
  opt.golden_path = args.get("golden", dir + "/golden.safetensors");
  opt.chunk = static_cast<int>(chunk);
  opt.dump_path = args.get("dump");
  if ((*model)->config().has_dspark() && is_dspark_golden(opt.golden_path))
    return verify_dspark_case(**model, dir, opt, parallel ? &par : nullptr, load_s);
  auto bounds = GoldenBounds::for_run(opt.golden_path, par.numerics, model_is_w8a8(**model));
  if (!bounds.ok()) {
    std::fprintf(stderr, "dsv4 verify: %s\n", bounds.status().message().c_str());
    return 2;
  }
  opt.bounds = *bounds;
  // What the weights take in memory against the checkpoint's bytes.
  int64_t file_bytes = 0;
  std::error_code ec;
  for (const auto& f : std::filesystem::directory_iterator(dir, ec))
    if (f.path().extension() == ".safetensors" && f.path().filename() != "golden.safetensors")
      file_bytes += static_cast<int64_t>(f.file_size(ec));
  const char* weights = model_is_w8a8(**model) ? "W8A8" : model_is_quantized(**model) ? "FP8/FP4" : "BF16/F32";
  std::printf("dsv4 verify\n  model   %s (%s)\n  weights %s, loaded in %.2fs; kernels %s, numerics %s\n"
              "          %.2f MiB resident, checkpoint %.2f MiB\n  golden  %s\n  prefill %s\n",
              dir.c_str(), (*model)->config().summary().c_str(), weights, load_s,
              kernels::isa_name(kernels::active_isa()), kernels::numerics_name(par.numerics),
              (*model)->weights().resident_bytes() / 1048576.0, file_bytes / 1048576.0, opt.golden_path.c_str(),
              chunk > 0 ? ("chunks of " + std::to_string(chunk)).c_str() : "whole prompt");
  t0 = std::chrono::steady_clock::now();
  StatusOr<VerifyReport> report = Status(StatusCode::kInternal, "not run");
  if (parallel) {
    auto run = verify_golden_parallel(dir, opt, par);
    if (run.ok()) {
      std::printf("  %s%s: %.2f MiB of weights per rank (at most), %.2f MiB on one rank\n",
                  run->topology.describe().c_str(), par.flashcomm.enabled ? ", FlashComm1" : "",
                  run->weight_bytes_per_rank / 1048576.0, run->weight_bytes_single / 1048576.0);
      report = run->report;
    } else {
      report = run.status();
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
