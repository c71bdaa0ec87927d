// dsv4 mkmodel: write a synthetic checkpoint.
#include <cstdio>

#include "checkpoint/config_json.h"

#include "args.h"
#include "tools/synthetic.h"
#include "tools/synthetic_v41.h"

namespace dsv4::app {
namespace {
const char* kHelp =
    "usage: dsv4 mkmodel --out DIR [--preset default|small|bench|flash|pro|v41-flash] [--config JSON]\n"
    "                    [--layers N] [--experts E] [--vocab V] [--engram-vocab R] [--weights bf16|fp8]\n"
    "                    [--seed S] [--shards N] [--mtp-copies-last-block] [--dspark]\n"
    "                    [--dspark-drafts-agree]\n"
    "  --preset   base configuration (default: the embedded default model; small: the golden cases'\n"
    "             shapes; bench: Flash shapes scaled down, about 4 GB with --weights fp8; flash, pro:\n"
    "             the released DeepSeek-V4-Flash / -Pro configs, every layer at its released shape;\n"
    "             v41-flash: DeepSeek-V4.1-Flash, FP8 as released, with its tokenizer.json written too)\n"
    "  --config   JSON object of config.json fields merged over the preset\n"
    "  --layers, --experts, --vocab  keep only the first N layers (and the MTP layer), E routed\n"
    "             experts, a V-token vocabulary: a real-shape model that fits a small machine (v41-flash\n"
    "             keeps the layers each role needs first: its KV sources, Engram layers, a layer sharing\n"
    "             each source, an index-only source; its DSpark stages tap the last three kept)\n"
    "  --engram-vocab  v41-flash: engram_vocab_size, the rows of each hash column (released 16000000:\n"
    "             384M rows, 101 GB per Engram layer)\n"
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

// --preset v41-flash (tools/synthetic_v41.h).
int make_v41(const Args& args, const PresetCounts& counts, uint64_t seed, int shards) {
  if (args.get("weights", "fp8") != "fp8" || args.has("mtp-copies-last-block") || args.has("dspark-drafts-agree")) {
    std::fprintf(stderr, "dsv4 mkmodel: v41-flash is written as released (FP8 weights, its own DSpark drafter): "
                         "--weights bf16, --mtp-copies-last-block and --dspark-drafts-agree do not apply\n");
    return 2;
  }
  auto config = synthetic_v41_config(args.get("config"), counts);
  if (!config.ok()) {
    std::fprintf(stderr, "dsv4 mkmodel: %s\n", config.status().message().c_str());
    return 2;
  }
  SyntheticOptions opt;
  opt.seed = seed;
  opt.shards = shards;
  Status st = write_synthetic_v41_checkpoint(*config, opt, args.get("out"));
  auto written = st.ok() ? load_any_model_config(args.get("out") + "/config.json") : StatusOr<ModelConfig>(st);
  if (!written.ok()) {
    std::fprintf(stderr, "dsv4 mkmodel: %s\n", written.status().message().c_str());
    return 2;
  }
  std::printf("wrote %s: DeepSeek-V4.1 %s, fp8 weights, seed %llu\n", args.get("out").c_str(), written->summary().c_str(),
              static_cast<unsigned long long>(seed));
  return 0;
}

}  // namespace

int cmd_mkmodel(int argc, char** argv) {
  Args args(argc, argv, 2,
            {"out", "preset", "config", "weights", "seed", "shards", "layers", "experts", "vocab", "engram-vocab"},
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
  counts.engram_vocab = args.get_int("engram-vocab", 0);
  counts.dspark = args.has("dspark");
  if (!args.ok()) {
    std::fprintf(stderr, "dsv4 mkmodel: %s\n", args.error().c_str());
    return 2;
  }
  if (preset == "v41-flash") return make_v41(args, counts, static_cast<uint64_t>(seed), static_cast<int>(shards));
  if (counts.engram_vocab) {
    std::fprintf(stderr, "dsv4 mkmodel: --engram-vocab is for --preset v41-flash (DeepSeek-V4 has no Engram)\n");
    return 2;
  }
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
