// The plain structs the model is driven with: which sequences, which
// positions, which tokens. The model owns no requests; callers own the states.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/sequence_cache.h"

namespace dsv4 {

// One sequence's share of a forward: tokens at positions
// [start_pos, start_pos + num_tokens), rows [row_begin, row_begin + num_tokens).
struct SeqChunk {
  SequenceCache* cache = nullptr;
  int64_t start_pos = 0;
  int64_t num_tokens = 0;
  int64_t row_begin = 0;
  // Length of the prompt this chunk prefills (0 for generated tokens); only
  // the indexer's tie order depends on it (see indexer.h).
  int64_t prefill_len = 0;
  // How many of the chunk's last rows get logits: 1 for sampling its next
  // token, all of them to verify draft tokens, 0 for a prefill chunk that
  // samples nothing.
  int64_t logit_rows = 1;
  // Raw KV rows of every position go to the cache (a prefix cache keeps
  // them), not only the last window_size ones the next chunk reads.
  bool keep_all_window_rows = false;
  // Positions below this have their cache rows already, in pages shared
  // with a prefix-cache block: the chunk recomputes them only to rebuild its
  // compressor states and writes none of their rows.
  int64_t cached_until = 0;
  // DeepSeek-V4.1's Engram reads n-grams reaching back before the chunk:
  // its last min(start_pos, max_ngram_size - 1) tokens.
  std::vector<int32_t> history;
};

// Receives named intermediate tensors (layer_out.N, final_hidden) so a golden
// comparison can say where two implementations part.
class ForwardTrace {
 public:
  virtual ~ForwardTrace() = default;
  virtual void record(const std::string& name, const float* rows, int64_t num_rows, int64_t row_size) = 0;
};

struct ForwardBatch {
  std::vector<int32_t> token_ids;  // all chunks' tokens, packed in chunk order
  std::vector<SeqChunk> chunks;
  ForwardTrace* trace = nullptr;
  // With the head split by vocabulary: logits of this rank's vocabulary
  // slice only (greedy decoding exchanges just each slice's best).
  bool local_logits = false;
  // The DSpark drafter's taps of every row (ForwardOutput::taps).
  bool want_taps = false;

  void add(SequenceCache* cache, const int32_t* tokens, int64_t n, int64_t prefill_len = 0, int64_t logit_rows = 1) {
    SeqChunk ch;
    ch.cache = cache;
    ch.start_pos = cache->length;
    ch.num_tokens = n;
    ch.row_begin = static_cast<int64_t>(token_ids.size());
    ch.prefill_len = prefill_len;
    ch.logit_rows = logit_rows;
    chunks.push_back(std::move(ch));
    token_ids.insert(token_ids.end(), tokens, tokens + n);
  }
  int64_t num_rows() const { return static_cast<int64_t>(token_ids.size()); }
  // The batch rows that get logits, chunk by chunk.
  std::vector<int64_t> logit_row_indices() const {
    std::vector<int64_t> rows;
    for (const SeqChunk& ch : chunks)
      for (int64_t i = ch.num_tokens - ch.logit_rows; i < ch.num_tokens; ++i) rows.push_back(ch.row_begin + i);
    return rows;
  }
};

struct ForwardOutput {
  // [logit rows, vocab_size]: each chunk's last logit_rows rows in batch
  // order; the columns [vocab_begin, vocab_begin + vocab_size) of the
  // vocabulary.
  std::vector<float> logits;
  int64_t vocab_begin = 0;
  int64_t vocab_size = 0;
  // [rows, hc, dim]: the streams entering the head (the main model's are
  // MTP's input; an MTP block's feed its next draft step).
  std::vector<float> hidden;
  // [rows, taps * dim] when the batch wants taps: per DSpark target layer
  // (ascending), its output streams averaged over the hc copies.
  std::vector<float> taps;
};

}  // namespace dsv4
