// Synthetic DeepSeek-V4.1 checkpoints (dsv4 mkmodel --preset v41-flash):
// the released config's shapes and layer roles in the released tensor names
// and formats, seeded random weights, a byte-level BPE tokenizer.json the
// Engram token map is derived from, and Engram tables sized by their hash
// layout. Counts shrink to fit a small machine; every kept layer keeps its
// released shape.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "base/status.h"
#include "tools/synthetic.h"

namespace dsv4 {

// The released V4.1-Flash config.json (nested form) with `overrides_json`
// merged into text_config, then the counts:
// - layers: which of the 40 layers stay, in this order of need: each
//   ratio's first KV source (layers 2, 20; 20 is the candidate source),
//   the Engram layers (1, 14), a layer reading each of those sources'
//   caches (3, 21), an index-only source (24), then the rest in order. The
//   kept layers are renumbered; sources, Engram layers and candidate source
//   follow them, and the DSpark stages tap the last three kept layers.
// - experts: the routed experts of the layers and of the DSpark stages
//   (each at most its release's count), top-k at most that.
// - vocab: the vocabulary (the DSpark noise and image token ids within it).
// - engram_vocab: engram_vocab_size, each hash column's table rows (the
//   release's 16M makes 384M rows per layer; the rows a table holds follow
//   from it in write_synthetic_v41_checkpoint).
StatusOr<nlohmann::json> synthetic_v41_config(const std::string& overrides_json, const PresetCounts& counts);

// Writes config.json (engram_compressed_vocab_size and
// engram_num_embeddings filled in from the tokenizer and the hash layout),
// tokenizer.json and the weights: FP8 in [32, 32] tiles, FP4 routed
// experts, BF16 embedding, head, norms and compressor, FP8 Engram tables
// with a scale per row and 32 values. options.weights is ignored (V4.1
// ships FP8).
Status write_synthetic_v41_checkpoint(nlohmann::json config, const SyntheticOptions& options, const std::string& dir);

// A byte-level BPE tokenizer.json of exactly `vocab` tokens: BOS, EOS and
// pad (ids 0-2), the 256 byte tokens, merges spelling a word list with the
// variants Engram's token map folds together (case, a leading space,
// accents, full width), the chat's special tokens, then reserved specials.
std::string synthetic_v41_tokenizer_json(int vocab);

}  // namespace dsv4
