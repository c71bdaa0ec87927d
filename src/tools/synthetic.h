// Synthetic DeepSeek-V4 checkpoints in the released tensor names and formats,
// for tests and benchmarks (dsv4 mkmodel): seeded, any size.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "model/config.h"

namespace dsv4 {

enum class SyntheticWeights { kBf16, kFp8 };  // fp8: FP8 blocks + FP4 routed experts

struct SyntheticOptions {
  SyntheticWeights weights = SyntheticWeights::kBf16;
  uint64_t seed = 0;
  int shards = 2;  // >1 writes model-0000i-of-0000N.safetensors + an index
  // The MTP block copies the last main block (and the MTP head the main
  // head), e_proj is the identity and h_proj zero, and the blocks before the
  // last add nothing to the streams (zero wo_b and w2): the MTP block then
  // sees what the last block sees one position later, a drafter that agrees
  // with the model most of the time (speculative decoding tests and
  // benchmarks).
  bool mtp_copies_last_block = false;
  // A DSpark checkpoint whose drafts the model accepts: every block of the
  // model and of the drafter adds nothing to the streams (zero wo_b and
  // w2), the head is the embedding scaled (so the model predicts the token
  // it reads again, with a logit margin of about 2), and the
  // Markov head strongly favours repeating the previous token. Greedy
  // decoding repeats the prompt's last token and accepts every draft;
  // sampled decoding accepts a draft about as often as the model's own
  // probability of repeating. The blocks still compute at their shapes
  // (speculative decoding benchmarks and tests).
  bool dspark_drafts_agree = false;
};

// Counts a preset can be shrunk to while every layer keeps its shape (0:
// the preset's own): the first `layers` layers (and the MTP layers),
// `experts` routed experts, a `vocab`-token vocabulary.
struct PresetCounts {
  int layers = 0, experts = 0, vocab = 0;
  int64_t engram_vocab = 0;  // DeepSeek-V4.1: engram_vocab_size (synthetic_v41.h)
  // Make it a DeepSeek-V4-Flash-DSpark checkpoint: three drafter stages
  // after the layers, tapping the last three (the release's block of 5 and
  // Markov rank 256), in place of the MTP layer.
  bool dspark = false;
};

// A preset's config ("default": a small random model, for tests that need
// one; "small": the golden cases' shapes, "bench": Flash scaled down,
// "flash" / "pro": the released configs), with a JSON object of
// config.json fields merged over it, then the counts.
StatusOr<ModelConfig> synthetic_config(const std::string& preset, const std::string& overrides_json = "",
                                       const PresetCounts& counts = {});

Status write_synthetic_checkpoint(const ModelConfig& config, const SyntheticOptions& options, const std::string& dir);

}  // namespace dsv4
