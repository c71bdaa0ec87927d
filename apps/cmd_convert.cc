// dsv4 convert: rewrite a checkpoint in another weight format.
#include <cstdio>

#include "args.h"
#include "tools/gguf_convert.h"
#include "tools/w8a8_convert.h"

namespace dsv4::app {
namespace {
const char* kHelp =
    "usage: dsv4 convert --to w8a8|gguf --model IN --out OUT\n"
    "  --to w8a8   int8 weights with an f32 scale per output channel (compressed-tensors\n"
    "              int-quantized), activations quantized to int8 per token at run time;\n"
    "              from a released FP8/FP4 checkpoint\n"
    "  --to gguf   one GGUF file for llama.cpp's deepseek4 architecture (FP8 to Q8_0, FP4\n"
    "              experts to MXFP4 losslessly, no MTP block, no tokenizer): for the peer benchmark\n"
    "  --model IN  the checkpoint to convert\n"
    "  --out OUT   where to write it (w8a8: a directory, shard by shard, run again to resume;\n"
    "              gguf: a file)\n";

int convert_gguf(const std::string& in, const std::string& out) {
  GgufConvertOptions opt;
  opt.input_dir = in;
  opt.output_path = out;
  auto report = convert_to_gguf(opt);
  if (!report.ok()) {
    std::fprintf(stderr, "dsv4 convert: %s\n", report.status().message().c_str());
    return 2;
  }
  std::printf("wrote %s: %lld tensors (%lld Q8_0 from FP8, %lld MXFP4 expert stacks from FP4, %lld kept); "
              "%lld MTP tensors left out; %.2f MiB in, %.2f MiB out\n",
              out.c_str(), static_cast<long long>(report->tensors), static_cast<long long>(report->q8_0),
              static_cast<long long>(report->mxfp4), static_cast<long long>(report->copied),
              static_cast<long long>(report->mtp_tensors_left_out), report->bytes_in / 1048576.0,
              report->bytes_out / 1048576.0);
  return 0;
}
}  // namespace

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
  if (args.get("to") == "gguf") return convert_gguf(args.get("model"), args.get("out"));
  if (args.get("to") != "w8a8") {
    std::fprintf(stderr, "dsv4 convert: --to %s is not supported (w8a8 and gguf are)\n", args.get("to").c_str());
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
