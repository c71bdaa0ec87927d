#include "model/deepseek_v41.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "base/phase_timer.h"
#include "base/scratch.h"
#include "base/thread_pool.h"
#include "kernels/dispatch.h"
#include "kernels/kernels.h"
#include "model/expert_dispatch.h"
#include "model/hyper_connection.h"
#include "model/token_split.h"
#include "ops/linear.h"
#include "ops/norm.h"
#include "ops/topk.h"

namespace dsv4 {
namespace {

using Buffer = std::vector<float>;

// SwiGLU goes in pieces of a hidden row.
constexpr int64_t kSwigluPiece = 512;

}  // namespace

DeepseekV41::DeepseekV41(ModelConfig config, std::unique_ptr<V41Weights> weights, std::vector<int32_t> token_map,
                         int32_t compressed_vocab)
    : config_(std::move(config)),
      weights_(std::move(weights)),
      token_map_(std::move(token_map)),
      window_rope_(window_rope_options(config_)),
      compress_rope_(compress_rope_options(config_)) {
  if (config_.engram.enabled())
    engram_layout_ = engram_hash_layout(config_.engram, compressed_vocab, token_map_[config_.engram.pad_id]);
}

// Engram: the rows of each position's hashed n-grams, projected to a key
// per hc copy and one value; each copy gains the value times a gate of how
// well the copy matches its key.
void DeepseekV41::engram(const V41Engram& g, int which, const std::vector<int64_t>& row_ids, float* h, int64_t rows,
                         const TokenSplit* held, const ReferenceRows& rr) const {
  const ModelConfig& c = config_;
  const int hc = c.hc_mult, cols = config_.engram.hash_columns();
  const int64_t dim = c.dim, hd = g.head_dim, flat = hc * dim, layers = config_.engram.layer_ids.size();
  const float dim_scale = static_cast<float>(std::pow(static_cast<double>(dim), -0.5));
  // In blocks of rows, so a long prefill chunk's buffers stay bounded. The
  // projection runs over every row (its features split over the tensor
  // group); h's rows take the gate.
  constexpr int64_t kBlockRows = 64;
  const int64_t first = held ? held->begin() : 0, last = held ? first + held->count() : rows;
  for (int64_t b0 = 0; b0 < rows; b0 += kBlockRows) {
    const int64_t n = std::min(kBlockRows, rows - b0);
    Buffer e(n * cols * hd), kv(n * (flat + dim));
    for (int64_t i = 0; i < n; ++i)
      for (int k = 0; k < cols; ++k) g.row(row_ids[((b0 + i) * layers + which) * cols + k], &e[(i * cols + k) * hd]);
    v41_linear_columns(g.wkv, tensor_group_, e.data(), n, kv.data());
    parallel_for(n, 1, [&](int64_t i0, int64_t i1) {
      Buffer prod(dim);
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t r = b0 + i;
        if (r < first || r >= last) continue;
        const float* keys = &kv[i * (flat + dim)];
        const float* value = keys + flat;
        float* hr = h + (r - first) * flat;
        for (int s = 0; s < hc; ++s) {
          const float* hs = hr + s * dim;
          const float* key = &keys[s * dim];
          const float* qk = &g.qk[s * dim];
          const float rstd =
              (1.0f / std::sqrt(kernels::sum_squares(hs, dim) / static_cast<float>(dim) + c.norm_eps)) *
              (1.0f / std::sqrt(kernels::sum_squares(key, dim) / static_cast<float>(dim) + c.norm_eps));
          for (int64_t d = 0; d < dim; ++d) prod[d] = hs[d] * qk[d] * key[d];
          const float dot = kernels::sum(prod.data(), dim) * rstd * dim_scale;
          const float gate = kernels::sigmoid_at(std::copysign(std::sqrt(std::fmax(std::fabs(dot), 1e-6f)), dot),
                                                 rr.element(r, hc, s), rr.elements(r, hc));
          float* out = hr + s * dim;
          for (int64_t d = 0; d < dim; ++d) out[d] = hs[d] + gate * value[d];
        }
      }
    });
  }
}

void DeepseekV41::use_fast_numerics() {
  if (numerics_ == kernels::Numerics::kFast) return;
  numerics_ = kernels::Numerics::kFast;
  // wo_a (the one dequantized linear) is multiplied a group at a time: its
  // panels must not span two groups.
  const bool wo_a_in_panels = config_.o_lora_rank % kernels::kPanel == 0;
  std::vector<V41Linear*> linears;
  weights_->for_each_product([&](V41Linear& l) {
    if (!l.dequantized || wo_a_in_panels) linears.push_back(&l);
  });
  // One linear a task: packing is a copy, and each linear's stored copy
  // is released as soon as its panels are made.
  parallel_for(static_cast<int64_t>(linears.size()), 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) linears[i]->pack_for_fast();
  });
}

std::unique_ptr<ContiguousCache> DeepseekV41::new_cache() const {
  const CacheGeometry g = CacheGeometry::of(config_);
  return std::make_unique<ContiguousCache>(g, 0, static_cast<int>(g.layers.size()));
}

void DeepseekV41::moe(const V41MoE& w, int top_k, const float* x, int64_t rows, const ReferenceRows& rr,
                      const TokenSplit* held, float* y) const {
  const ModelConfig& c = config_;
  const int64_t dim = c.dim, E = w.gate.out, inter = c.moe_inter_dim;
  const int k = top_k;
  // A tensor-parallel rank routes its block of the rows (the rows are every
  // rank's), so no row is dispatched twice.
  const TokenSplit split = TokenSplit::of(rows, tensor_group_);
  const int64_t first = split.begin(), n = split.count();
  PhaseTimer::Scope time(Phase::kExperts);
  // Routing: sqrt(softplus(x . gate / temp)); the bias picks, the scores weigh.
  Buffer scores(n * E);
  v41_linear(w.gate, x + first * dim, n, scores.data());
  std::vector<int32_t> chosen(n * k);
  Buffer weights(n * k);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = first + i;
    float* s = &scores[i * E];
    Buffer biased(E);
    for (int64_t e = 0; e < E; ++e) {
      s[e] = std::sqrt(kernels::softplus_at(s[e] / c.gate_temp, rr.element(r, E, e), rr.elements(r, E)));
      biased[e] = s[e] + w.gate_bias[e];
    }
    topk_like_torch(biased.data(), E, k, &chosen[i * k]);
    float* wr = &weights[i * k];
    for (int j = 0; j < k; ++j) wr[j] = s[chosen[i * k + j]];
    if (k > 1) {
      const float sum = kernels::sum(wr, k) + 1e-20f;
      for (int j = 0; j < k; ++j) wr[j] /= sum;
    }
    for (int j = 0; j < k; ++j) wr[j] *= c.route_scale;
  }
  // gate <- weight * silu(clamped gate) * clamped up over features [j0, j1)
  // of row r of an expert's [n, inter] hidden rows.
  const float lim = c.swiglu_limit;
  auto swiglu = [&](float* gate, float* up, int64_t n, const float* row_weight, int64_t r, int64_t j0, int64_t j1) {
    for (int64_t i = r * inter + j0; i < r * inter + j1; ++i) {
      if (lim > 0) {
        up[i] = std::clamp(up[i], -lim, lim);
        gate[i] = std::min(gate[i], lim);
      }
      // Where the element sits in the [n, inter] tensor decides its rounding.
      gate[i] = kernels::silu_at(gate[i], i, n * inter) * up[i];
      if (row_weight) gate[i] = row_weight[r] * gate[i];
    }
  };
  // An expert over its rows: w2(weight * silu(clamped w1 x) * clamped w3 x)
  // (the shared expert's features split over the tensor group and gathered,
  // or its output rows kept to `keep`'s block).
  auto expert = [&](const V41Expert& e, const float* in, int64_t n, const float* row_weight, float* out,
                    const TokenSplit* keep) {
    Buffer gate(n * inter), up(n * inter);
    v41_linear_columns(e.w1, tensor_group_, in, n, gate.data());
    v41_linear_columns(e.w3, tensor_group_, in, n, up.data());
    // Elementwise, in pieces of a row (a decode row's thousands of features
    // in a job).
    parallel_for_pieces(n, inter, kSwigluPiece, 1, [&](int64_t r, int64_t j0, int64_t j1) {
      swiglu(gate.data(), up.data(), n, row_weight, r, j0, j1);
    });
    if (keep) v41_linear_columns_to_rows(e.w2, tensor_group_, *keep, gate.data(), n, out);
    else v41_linear_columns(e.w2, tensor_group_, gate.data(), n, out);
  };
  // Fast numerics with every routed expert whole on its rank (as they are:
  // expert parallelism splits experts, not their features): every expert's
  // w1 and w3 in one pool job, SwiGLU in one, every w2 in one, where a job
  // a linear an expert made 17 a layer. Each product's bits are its own.
  auto all_at_once = [&](const std::vector<ExpertRows>& held) {
    std::vector<int64_t> first{0};  // of each expert's hidden rows
    for (const ExpertRows& e : held) first.push_back(first.back() + e.n * inter);
    ScratchVector<float> gate(first.back()), up(first.back());
    std::vector<LinearProduct> products;
    for (size_t i = 0; i < held.size(); ++i) {
      const V41Expert& e = w.experts[held[i].expert];
      products.push_back({&e.w1.panels, held[i].x, held[i].n, gate.data() + first[i]});
      products.push_back({&e.w3.panels, held[i].x, held[i].n, up.data() + first[i]});
    }
    const kernels::Kernels& fast = kernels::kernels_for(kernels::Numerics::kFast);
    linear_forward_all(fast, products);
    std::vector<int64_t> row_of{0};  // every expert's rows, in one numbering
    for (const ExpertRows& e : held) row_of.push_back(row_of.back() + e.n);
    parallel_for_pieces(row_of.back(), inter, kSwigluPiece, 1, [&](int64_t at, int64_t j0, int64_t j1) {
      const size_t i = std::upper_bound(row_of.begin(), row_of.end(), at) - row_of.begin() - 1;
      swiglu(gate.data() + first[i], up.data() + first[i], held[i].n, held[i].row_weights, at - row_of[i], j0, j1);
    });
    products.clear();
    for (size_t i = 0; i < held.size(); ++i)
      products.push_back({&w.experts[held[i].expert].w2.panels, gate.data() + first[i], held[i].n, held[i].y});
    linear_forward_all(fast, products);
  };
  // (Another rank's experts are empty here.)
  const bool batched = std::all_of(w.experts.begin(), w.experts.end(), [](const V41Expert& e) {
    for (const V41Linear* l : {&e.w1, &e.w2, &e.w3})
      if (l->out > 0 && !(l->packed() && l->parts == 1)) return false;
    return true;
  });
  // The routed experts (on the ranks holding them), added per row in
  // expert-index order from zero, then the shared expert.
  const ExpertSlots slots{chosen.data(), weights.data(), n, k, static_cast<int>(E)};
  SlotOutputs slot_out;
  Buffer routed(n * dim), shared((held ? n : rows) * dim);
  run_expert_slots(slots, x + first * dim, dim, expert_group_,
                   batched ? RunExperts(all_at_once)
                           : one_expert_at_a_time([&](int e, const float* in, int64_t m, const float* rw, float* out) {
                               expert(w.experts[e], in, m, rw, out, nullptr);
                             }),
                   &slot_out);
  sum_slots_in_expert_order(slots, slot_out, dim, routed.data());
  // Under FlashComm1 the routed block is this rank's rows already.
  if (held) std::copy(routed.begin(), routed.end(), y);
  else gather_rows(tensor_group_, split, routed.data(), dim, y);
  expert(w.shared, x, rows, nullptr, shared.data(), held);
  for (size_t i = 0; i < shared.size(); ++i) y[i] += shared[i];
}

void DeepseekV41::block(const V41Block& b, const Attend& attend, int top_k, const ReferenceRows& rr,
                        const TokenSplit* held, std::vector<float>* pre, float* h) const {
  const ModelConfig& c = config_;
  // The mixes as V4's: in fast numerics summed in pieces, so a decode
  // row's 2 MiB of f32 mixing weights spread over the pool (in one sum a
  // mix, its two panels kept two workers streaming while the rest waited).
  const kernels::Kernels& k = kernels::kernels_for(numerics_);
  const int64_t rows = static_cast<int64_t>(pre->size()) / c.hc_mult, dim = c.dim;
  const int64_t all_rows = held ? held->rows : rows;
  const ReferenceRows held_rr = held ? rr.slice(held->begin(), rows) : rr;
  Buffer x(rows * dim), y(rows * dim), x_all(held ? all_rows * dim : 0);
  // A sublayer's input: every row (gathered from the blocks under FlashComm1).
  auto every_row = [&]() -> const float* {
    if (!held) return x.data();
    gather_rows(tensor_group_, *held, x.data(), dim, x_all.data());
    return x_all.data();
  };
  // Attention: collapsed with the previous sublayer's pre; its own mixes
  // come from its input, and its pre collapses for the MoE.
  std::optional<PhaseTimer::Scope> mixing(Phase::kHyperConnections);
  const HcMix attn = hc_mixes(k, b.hc_attn, c, h, rows, held_rr, /*divide=*/true);
  hc_collapse(pre->data(), c, h, rows, x.data());
  rms_norm_rows(b.attn_norm, c.norm_eps, x.data(), rows, dim);
  mixing.reset();
  attend(every_row(), y.data());
  mixing.emplace(Phase::kHyperConnections);
  hc_post(attn, c, y.data(), rows, h, h);
  const HcMix ffn = hc_mixes(k, b.hc_ffn, c, h, rows, held_rr, /*divide=*/true);
  hc_collapse(attn.pre.data(), c, h, rows, x.data());
  rms_norm_rows(b.ffn_norm, c.norm_eps, x.data(), rows, dim);
  mixing.reset();
  moe(b.ffn, top_k, every_row(), all_rows, rr, held, y.data());
  PhaseTimer::Scope post(Phase::kHyperConnections);
  hc_post(ffn, c, y.data(), rows, h, h);
  *pre = ffn.pre;
}

Status DeepseekV41::forward_mtp(int, const ForwardBatch&, const float*, ForwardOutput*, bool) const {
  return invalid_argument("DeepSeek-V4.1 has no MTP block: its drafter is DSpark");
}

Status DeepseekV41::check_batch(const ForwardBatch& batch, std::vector<V41Chunk>* chunks_out) const {
  const ModelConfig& c = config_;
  std::vector<V41Chunk> chunks;
  int64_t next_row = 0;
  for (const SeqChunk& in : batch.chunks) {
    if (!in.cache || in.num_tokens <= 0) return invalid_argument("a V4.1 forward chunk has no cache or no tokens");
    if (in.start_pos != in.cache->length)
      return invalid_argument("a V4.1 forward chunk starts at " + std::to_string(in.start_pos) +
                              ", its sequence is at " + std::to_string(in.cache->length));
    if (in.row_begin != next_row || in.row_begin + in.num_tokens > batch.num_rows())
      return invalid_argument("a V4.1 forward's chunks do not tile its rows");
    next_row += in.num_tokens;
    if (in.logit_rows < 0 || in.logit_rows > in.num_tokens)
      return invalid_argument("a V4.1 forward chunk asks for " + std::to_string(in.logit_rows) + " logit rows of " +
                              std::to_string(in.num_tokens));
    for (const V41Chunk& other : chunks)
      if (other.cache == in.cache) return invalid_argument("a sequence is in a V4.1 forward twice");
    const int64_t look_back = std::min<int64_t>(in.start_pos, history_tokens());
    if (static_cast<int64_t>(in.history.size()) != look_back)
      return invalid_argument("a V4.1 forward at position " + std::to_string(in.start_pos) + " needs the " +
                              std::to_string(look_back) + " tokens before it for Engram, got " +
                              std::to_string(in.history.size()));
    for (int32_t t : in.history)
      if (t < 0 || t >= c.vocab_size) return invalid_argument("history token " + std::to_string(t) + " is outside the vocabulary");
    chunks.push_back({in.cache, in.start_pos, in.num_tokens, in.row_begin, in.prefill_len, in.cached_until,
                      in.keep_all_window_rows});
  }
  if (next_row != batch.num_rows()) return invalid_argument("a V4.1 forward's chunks do not tile its rows");
  for (int32_t t : batch.token_ids)
    if (t < 0 || t >= c.vocab_size)
      return invalid_argument("token id " + std::to_string(t) + " is outside the vocabulary [0, " +
                              std::to_string(c.vocab_size) + ")");
  if (chunks_out) *chunks_out = std::move(chunks);
  return Status::Ok();
}

Status DeepseekV41::forward(const ForwardBatch& batch, ForwardOutput* out, bool) const {
  DSV4_RETURN_IF_ERROR(check_batch(batch, nullptr));
  std::vector<int64_t> cut;
  bool split = false;
  for (const SeqChunk& ch : batch.chunks) {
    cut.push_back(v41_first_row_after_unwritten_keys(config_, ch.start_pos, ch.num_tokens, ch.prefill_len));
    split = split || cut.back() < ch.num_tokens;
  }
  // An expert group's ranks run their layers together: when any of them
  // cuts, all run in two (a rank without a cut keeps every row in the
  // first part, its second empty).
  if (expert_group_ && expert_group_->size() > 1) {
    const char mine = split;
    std::vector<char> all(expert_group_->size());
    expert_group_->all_gather(&mine, 1, all.data());
    split = std::find(all.begin(), all.end(), 1) != all.end();
  }
  return split ? forward_in_two(batch, cut, out) : forward_rows(batch, out);
}

// Each chunk's rows before its cut, then (in a forward of their own, which
// may cut again) the rest; the outputs put back in the batch's order.
Status DeepseekV41::forward_in_two(const ForwardBatch& batch, const std::vector<int64_t>& cut,
                                   ForwardOutput* out) const {
  const int64_t V = config_.vocab_size, taps = int64_t{config_.dspark_taps()} * config_.dim;
  auto part = [&](ForwardBatch* b, const SeqChunk& ch, int64_t from, int64_t n, int64_t logit_rows,
                  std::vector<int32_t> history) {
    b->add(ch.cache, &batch.token_ids[ch.row_begin + from], n, ch.prefill_len, logit_rows);
    SeqChunk& added = b->chunks.back();
    added.cached_until = ch.cached_until;
    added.keep_all_window_rows = ch.keep_all_window_rows;
    added.history = std::move(history);
  };
  ForwardBatch first, second;
  first.want_taps = second.want_taps = batch.want_taps;
  for (size_t k = 0; k < batch.chunks.size(); ++k) {
    const SeqChunk& ch = batch.chunks[k];
    const int64_t rest = ch.num_tokens - cut[k];
    part(&first, ch, 0, cut[k], std::max<int64_t>(0, ch.logit_rows - rest), ch.history);
  }
  ForwardOutput one;
  DSV4_RETURN_IF_ERROR(forward_rows(first, &one));
  for (size_t k = 0; k < batch.chunks.size(); ++k) {
    const SeqChunk& ch = batch.chunks[k];
    const int64_t rest = ch.num_tokens - cut[k];
    if (rest == 0) continue;
    // Engram's look-back before the second part: the history and the first part's tokens.
    std::vector<int32_t> seen = ch.history;
    seen.insert(seen.end(), batch.token_ids.begin() + ch.row_begin, batch.token_ids.begin() + ch.row_begin + cut[k]);
    const int64_t back = std::min<int64_t>(ch.start_pos + cut[k], history_tokens());
    part(&second, ch, cut[k], rest, std::min(ch.logit_rows, rest), std::vector<int32_t>(seen.end() - back, seen.end()));
  }
  ForwardOutput two;
  DSV4_RETURN_IF_ERROR(forward(second, &two));
  // Chunk by chunk: the first part's logit rows and taps, then the second's.
  out->vocab_begin = 0;
  out->vocab_size = V;
  out->logits.clear();
  out->taps.clear();
  out->hidden.clear();
  int64_t l1 = 0, l2 = 0, r1 = 0, r2 = 0;
  for (size_t k = 0, j = 0; k < batch.chunks.size(); ++k) {
    const SeqChunk& a = first.chunks[k];
    out->logits.insert(out->logits.end(), one.logits.begin() + l1 * V, one.logits.begin() + (l1 + a.logit_rows) * V);
    l1 += a.logit_rows;
    if (batch.want_taps)
      out->taps.insert(out->taps.end(), one.taps.begin() + r1 * taps, one.taps.begin() + (r1 + a.num_tokens) * taps);
    r1 += a.num_tokens;
    if (a.num_tokens == batch.chunks[k].num_tokens) continue;
    const SeqChunk& b = second.chunks[j++];
    out->logits.insert(out->logits.end(), two.logits.begin() + l2 * V, two.logits.begin() + (l2 + b.logit_rows) * V);
    l2 += b.logit_rows;
    if (batch.want_taps)
      out->taps.insert(out->taps.end(), two.taps.begin() + r2 * taps, two.taps.begin() + (r2 + b.num_tokens) * taps);
    r2 += b.num_tokens;
  }
  return Status::Ok();
}

Status DeepseekV41::forward_rows(const ForwardBatch& batch, ForwardOutput* out) const {
  const ModelConfig& c = config_;
  const int hc = c.hc_mult;
  const int64_t dim = c.dim, flat = hc * dim;
  // The batch's rows, and where each sits in the reference's own tensors:
  // a prompt row in its prompt's one-shot prefill, a decode row as the first
  // of a two-sequence decode step (model/reference_rows.h).
  const std::vector<int32_t>& tokens = batch.token_ids;
  std::vector<V41Chunk> chunks;
  DSV4_RETURN_IF_ERROR(check_batch(batch, &chunks));
  const int64_t rows = batch.num_rows();
  const ReferenceRows rr = ReferenceRows::of(batch);

  // Engram rows of every position: its n-grams of compressed ids, from the
  // look-back and the chunk.
  std::vector<int64_t> engram_ids;
  if (c.engram.enabled()) {
    const int64_t per = static_cast<int64_t>(c.engram.layer_ids.size()) * engram_layout_.columns();
    engram_ids.resize(rows * per);
    for (size_t k = 0; k < chunks.size(); ++k) {
      const V41Chunk& ch = chunks[k];
      std::vector<int64_t> ids;
      for (int32_t t : batch.chunks[k].history) ids.push_back(token_map_[t]);
      const int64_t back = static_cast<int64_t>(ids.size());
      for (int64_t i = 0; i < ch.num_tokens; ++i) ids.push_back(token_map_[tokens[ch.row_begin + i]]);
      for (int64_t i = 0; i < ch.num_tokens; ++i)
        engram_rows(engram_layout_, ids.data(), back + i, &engram_ids[(ch.row_begin + i) * per]);
    }
  }

  // FlashComm1: a prefill forward's residual stream held in blocks of rows
  // over the tensor group (every rank decides alike: the batch is theirs).
  const TokenSplit split = TokenSplit::of(rows, tensor_group_);
  const bool prefill = std::any_of(batch.chunks.begin(), batch.chunks.end(),
                                   [](const SeqChunk& ch) { return ch.start_pos < ch.prefill_len; });
  const bool flashcomm = flashcomm_.enabled && split.size > 1 && prefill && rows >= flashcomm_.min_tokens;
  if (flashcomm) ++flashcomm_forwards_;
  const TokenSplit* held = flashcomm ? &split : nullptr;
  const int64_t first = flashcomm ? split.begin() : 0, n_held = flashcomm ? split.count() : rows;
  // Every row of the stream (h_all, pre_all) from the blocks, when a trace
  // or the head wants them.
  Buffer h_all, pre_all;
  auto every_row = [&](const Buffer& mine, int64_t width, Buffer* all) -> const float* {
    if (!held) return mine.data();
    all->resize(rows * width);
    gather_rows(tensor_group_, split, mine.data(), width, all->data());
    return all->data();
  };

  // The embedding in every copy; layer 0 collapses with copy 0 alone.
  std::optional<PhaseTimer::Scope> embed_time(Phase::kHead);
  Buffer h(n_held * flat), pre(n_held * hc, 0.0f);
  for (int64_t i = 0; i < n_held; ++i) {
    weights_->embed.row(tokens[first + i], &h[i * flat]);
    for (int s = 1; s < hc; ++s) std::copy_n(&h[i * flat], dim, &h[i * flat + s * dim]);
    pre[i * hc] = 1.0f;
  }
  embed_time.reset();
  V41Shared shared;
  shared.topk.resize(rows);
  shared.candidates.resize(rows);
  const int taps = c.dspark_taps();
  const int64_t tap_width = int64_t{taps} * dim;
  Buffer held_taps(batch.want_taps ? n_held * tap_width : 0, 0.0f);
  for (int i = 0; i < c.n_layers; ++i) {
    const V41Block& b = weights_->blocks[i];
    if (b.engram) {
      const auto& ids = c.engram.layer_ids;
      engram(*b.engram, static_cast<int>(std::find(ids.begin(), ids.end(), i) - ids.begin()), engram_ids, h.data(),
             rows, held, rr);
    }
    // A DSpark tap is the block's input, the mean of its copies.
    const auto tap = std::find(c.dspark_target_layer_ids.begin(), c.dspark_target_layer_ids.end(), i);
    if (batch.want_taps && tap != c.dspark_target_layer_ids.end()) {
      const int64_t k = tap - c.dspark_target_layer_ids.begin();
      for (int64_t r = 0; r < n_held; ++r)
        for (int64_t d = 0; d < dim; ++d) {
          float sum = 0.0f;
          for (int s = 0; s < hc; ++s) sum += h[r * flat + s * dim + d];
          held_taps[(r * taps + k) * dim + d] = sum / static_cast<float>(hc);
        }
    }
    const V41LayerContext ctx = layer_context(i, b.attn.ratio, held);
    const Attend attend = [&](const float* x, float* y) {
      v41_attention(b.attn, ctx, chunks, x, rows, &shared, y);
    };
    block(b, attend, c.n_activated_experts, rr, held, &pre, h.data());
    if (batch.trace) batch.trace->record("layer_out." + std::to_string(i), every_row(h, flat, &h_all), rows, flat);
  }
  if (batch.want_taps) {
    Buffer taps_all;
    const float* all = every_row(held_taps, tap_width, &taps_all);
    out->taps.assign(all, all + rows * tap_width);
  } else {
    out->taps.clear();
  }
  const float* h_rows = every_row(h, flat, &h_all);
  const float* pre_rows = every_row(pre, hc, &pre_all);
  // The head: each chunk's logit rows, collapsed with the last FFN's mix.
  PhaseTimer::Scope head_time(Phase::kHead);
  const std::vector<int64_t> logit_rows = batch.logit_row_indices();
  const int64_t n = static_cast<int64_t>(logit_rows.size());
  Buffer x(n * dim);
  for (int64_t i = 0; i < n; ++i)
    hc_collapse(&pre_rows[logit_rows[i] * hc], c, &h_rows[logit_rows[i] * flat], 1, &x[i * dim]);
  rms_norm_rows(weights_->norm, c.norm_eps, x.data(), n, dim);
  out->vocab_begin = 0;
  out->vocab_size = c.vocab_size;
  out->logits.resize(n * c.vocab_size);
  v41_linear_columns(weights_->head, tensor_group_, x.data(), n, out->logits.data());
  out->hidden.clear();
  for (const V41Chunk& ch : chunks) ch.cache->length += ch.num_tokens;
  return Status::Ok();
}

}  // namespace dsv4
