// dsv4 mkmodel: write a synthetic checkpoint.
#include <cstdio>

#include "args.h"
#include "tools/synthetic.h"

namespace dsv4::app {
namespace {
const char* kHelp =
    "usage: dsv4 mkmodel --out DIR [--preset default|small|bench|flash|pro] [--config JSON]\n"
    "                    [--layers N] [--experts E] [--vocab V] [--weights bf16|fp8]\n"
    "                    [--seed S] [--shards N] [--mtp-copies-last-block] [--dspark]\n"
    "                    [--dspark-drafts-agree]\n"
    "  --preset   base configuration (default: the embedded default model; small: the golden cases'\n"
    "             shapes; bench: Flash shapes scaled down, about 4 GB with --weights fp8; flash, pro:\n"
    "             the released DeepSeek-V4-Flash / -Pro configs, every layer at its released shape)\n"
    "  --config   JSON object of config.json fields merged over the preset\n"
    "  --layers, --experts, --vocab  keep only the first N layers (and the MTP layer), E routed\n"
    "             experts, a V-token vocabulary: a real-shape model that fits a small machine\n"
    "  --weights  bf16 or fp8: FP8 128x128 blocks, FP4 routed experts, BF16 embedding and head\n"
    "             (default: fp8 for flash and pro, as released; bf16 otherwise)\n"
    "  --seed     random seed (default 0)\n"
    "  --shards   number of safetensors files (default 2, with an index)\n"
    "  --mtp-copies-last-block  the MTP block copies the last main block (and the main head), e_proj\n"
    "             is the identity, h_proj zero, and the blocks before the last add nothing (zero wo_b,\n"
    "             w2): a drafter that agrees with the model most of the time\n"
    "  --dspark   a DeepSeek-V4-Flash-DSpark checkpoint: the DSpark drafter's three stages (tapping the\n"
    "             last three layers, block 5, Markov rank 256) in place of the MTP layer\n"
    "  --dspark-drafts-agree  with --dspark: every block adds nothing (zero wo_b, w2), the head is\n"
    "             the embedding scaled and the Markov head favours repeating: the model repeats its\n"
    "             last token and accepts every greedy draft (speculative decoding benchmarks)\n";
}

int cmd_mkmodel(int argc, char** argv) {
  Args args(argc, argv, 2, {"out", "preset", "config", "weights", "seed", "shards", "layers", "experts", "vocab"},
            {"help", "mtp-copies-last-block", "dspark", "dspark-drafts-agree"});
  long seed = args.get_int("seed", 0), shards = args.get_int("shards", 2);
  if (args.has("help")) {
    std::fputs(kHelp, stdout);
    return 0;
  }
  if (!args.ok() || !args.has("out")) {
    std::fprintf(stderr, "dsv4 mkmodel: %s\n%s", args.ok() ? "--out is required" : args.error().c_str(), kHelp);
    return 2;
  }
  const std::string preset = args.get("preset", "default");
  const bool released = preset == "flash" || preset == "pro";
  const std::string weights = args.get("weights", released ? "fp8" : "bf16");
  if ((weights != "bf16" && weights != "fp8") || shards < 1 || seed < 0) {
    std::fprintf(stderr, "dsv4 mkmodel: --weights must be bf16 or fp8, --shards >= 1, --seed >= 0\n");
    return 2;
  }
  PresetCounts counts;
  counts.layers = static_cast<int>(args.get_int("layers", 0));
  counts.experts = static_cast<int>(args.get_int("experts", 0));
  counts.vocab = static_cast<int>(args.get_int("vocab", 0));
  counts.dspark = args.has("dspark");
  auto config = synthetic_config(preset, args.get("config"), counts);
  if (!config.ok()) {
    std::fprintf(stderr, "dsv4 mkmodel: %s\n", config.status().message().c_str());
    return 2;
  }
  SyntheticOptions opt;
  opt.weights = weights == "fp8" ? SyntheticWeights::kFp8 : SyntheticWeights::kBf16;
  opt.seed = static_cast<uint64_t>(seed);
  opt.shards = static_cast<int>(shards);
  opt.mtp_copies_last_block = args.has("mtp-copies-last-block");
  opt.dspark_drafts_agree = args.has("dspark-drafts-agree");
  Status st = write_synthetic_checkpoint(*config, opt, args.get("out"));
  if (!st.ok()) {
    std::fprintf(stderr, "dsv4 mkmodel: %s\n", st.message().c_str());
    return 2;
  }
  std::printf("wrote %s: %s, %s weights, seed %ld\n", args.get("out").c_str(), config->summary().c_str(), weights.c_str(), seed);
  return 0;
}

}  // namespace dsv4::app
