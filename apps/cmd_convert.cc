// dsv4 convert: rewrite a checkpoint in another weight format.
#include <cstdio>

#include "args.h"
#include "model/w8a8_convert.h"

namespace dsv4::app {
namespace {
const char* kHelp =
    "usage: dsv4 convert --to w8a8 --model IN --out OUT\n"
    "  --to w8a8   int8 weights with an f32 scale per output channel (compressed-tensors\n"
    "              int-quantized), activations quantized to int8 per token at run time;\n"
    "              from a released FP8/FP4 checkpoint\n"
    "  --model IN  the checkpoint to convert\n"
    "  --out OUT   where to write it (shard by shard; run again to resume)\n";
}

int cmd_convert(int argc, char** argv) {
  Args args(argc, argv, 2, {"to", "model", "out"}, {"help"});
  if (args.has("help")) {
    std::fputs(kHelp, stdout);
    return 0;
  }
  if (!args.ok() || !args.has("to") || !args.has("model") || !args.has("out")) {
    std::fprintf(stderr, "dsv4 convert: %s\n%s",
                 args.ok() ? "--to, --model and --out are required" : args.error().c_str(), kHelp);
    return 2;
  }
  if (args.get("to") != "w8a8") {
    std::fprintf(stderr, "dsv4 convert: --to %s is not supported (w8a8 is)\n", args.get("to").c_str());
    return 2;
  }
  ConvertOptions opt;
  opt.input_dir = args.get("model");
  opt.output_dir = args.get("out");
  opt.on_shard = [](const std::string& shard, bool skipped) {
    std::printf("  %s %s\n", shard.c_str(), skipped ? "already converted, kept" : "converting");
    std::fflush(stdout);
  };
  auto report = convert_to_w8a8(opt);
  if (!report.ok()) {
    std::fprintf(stderr, "dsv4 convert: %s\n", report.status().message().c_str());
    return 2;
  }
  std::printf("wrote %s: %lld linears to W8A8, %lld tensors copied; %d shards written, %d kept from an earlier "
              "run; %.2f MiB in, %.2f MiB out\n",
              opt.output_dir.c_str(), static_cast<long long>(report->linears_converted),
              static_cast<long long>(report->tensors_copied), report->shards_written, report->shards_skipped,
              report->bytes_in / 1048576.0, report->bytes_out / 1048576.0);
  return 0;
}

}  // namespace dsv4::app
