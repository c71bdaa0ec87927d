#include "model/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

#include "base/check.h"
#include "base/phase_timer.h"
#include "base/scratch.h"
#include "base/thread_pool.h"
#include "kernels/kernels.h"
#include "model/compressor.h"
#include "model/indexer.h"
#include "model/token_split.h"

namespace dsv4 {
namespace {

using Buffer = ScratchVector<float>;

// RoPE on the last rope_dim dims of a vector of size `stride` at position pos.
void rope_vector(const Rope& rope, float* v, int64_t stride, int rope_dim, int64_t pos, bool inverse) {
  thread_local std::vector<float> cos, sin;
  cos.resize(rope_dim / 2);
  sin.resize(rope_dim / 2);
  rope.angles(pos, cos.data(), sin.data());
  kernels::rope(v + stride - rope_dim, cos.data(), sin.data(), rope_dim / 2, inverse);
}

// fn(v) for each of `count` vectors, up to 4 a task, fewer when that leaves
// threads idle (a decode step's one token has only its heads).
template <class Fn>
void for_vectors(int64_t count, Fn fn) {
  const int64_t grain = std::clamp<int64_t>(count / ThreadPool::current().num_threads(), 1, 4);
  parallel_for(count, grain, [&](int64_t v0, int64_t v1) {
    for (int64_t v = v0; v < v1; ++v) fn(v);
  });
}

// RoPE on the last rope_dim dims of `count` vectors of size `stride`, the
// vector v at position pos_of(v), after before(v) and then after(v) on
// each (in the same pool job: each vector's steps are its own).
template <class PosOf, class Before = void (*)(int64_t), class After = void (*)(int64_t)>
void rope_tail(const Rope& rope, float* x, int64_t count, int64_t stride, int rope_dim, PosOf pos_of, bool inverse,
               Before before = [](int64_t) {}, After after = [](int64_t) {}) {
  for_vectors(count, [&](int64_t v) {
    before(v);
    rope_vector(rope, x + v * stride, stride, rope_dim, pos_of(v), inverse);
    after(v);
  });
}

// Heads one attention task takes: up to 64 (all of a released model's),
// which share the token's key slots (decoded once a task for the scores
// and once for the weighted sum), when the tokens give every thread
// several tasks (a prefill chunk); else 16, or fewer when the tokens are
// too few to give each of the pool's threads a task (decode on a many-core
// node). A head's result is the same in any group (the kernels' heads are
// independent lanes), so this changes no number.
constexpr int64_t kMostHeadsPerTask = 64;
int64_t heads_per_task(int64_t tokens, int64_t heads) {
  const int64_t threads = ThreadPool::current().num_threads();
  auto tasks = [&](int64_t g) { return tokens * ((heads + g - 1) / g); };
  int64_t g = kMostHeadsPerTask;
  while (g > kernels::kPanel && tasks(g) < ThreadPool::kChunksPerThread * threads) g /= 2;
  while (g > 1 && tasks(g) < threads) g /= 2;
  return g;
}

// Per-row position of a packed batch.
std::vector<int64_t> row_positions(const std::vector<SeqChunk>& chunks, int64_t rows) {
  std::vector<int64_t> pos(rows);
  for (const auto& ch : chunks)
    for (int64_t i = 0; i < ch.num_tokens; ++i) pos[ch.row_begin + i] = ch.start_pos + i;
  return pos;
}

// A compressor's projections of x: whole rows of kv and score (split by
// features over tensor parallelism), added to the layer's other products
// of x so that they run in one job.
struct CompressorInputs {
  Buffer kv, score;
  void add(const CompressorWeights& w, const LayerContext& ctx, const float* x, int64_t rows,
           std::vector<LinearProduct>* columns) {
    const int64_t width = w.wkv.out * (ctx.tp ? ctx.tp->size() : 1);
    kv.resize(rows * width);
    score.resize(rows * width);
    columns->push_back({&w.wkv, x, rows, kv.data()});
    columns->push_back({&w.wgate, x, rows, score.data()});
  }
};

// Pools each chunk's projections into its sequence's rows.
void run_compressor(const CompressorWeights& w, const LayerContext& ctx, const CompressorInputs& in,
                    const std::vector<SeqChunk>& chunks, bool index_keys) {
  PhaseTimer::Scope time(Phase::kCompressor);
  const ModelConfig& c = ctx.config;
  const int64_t width = w.wkv.out * (ctx.tp ? ctx.tp->size() : 1);
  const float* kv = in.kv.data();
  const float* score = in.score.data();
  parallel_for(static_cast<int64_t>(chunks.size()), 1, [&](int64_t c0, int64_t c1) {
    for (int64_t ci = c0; ci < c1; ++ci) {
      const SeqChunk& ch = chunks[ci];
      SequenceCache* cache = ch.cache;
      const int layer = ctx.cache_layer;
      const CompressorStateView st =
          index_keys ? cache->index_compressor_state(layer) : cache->compressor_state(layer);
      compress_tokens(ctx.k, w, ctx.rope, c.rope_head_dim, c.norm_eps, kv + ch.row_begin * width,
                      score + ch.row_begin * width, ch.start_pos, ch.num_tokens, st, ch.cached_until,
                      [&](int64_t row) {
                        return index_keys ? cache->index_row(layer, row) : cache->compressed_row(layer, row);
                      });
    }
  });
}

// The key slots query position t attends, laid out as the reference lays
// out its index rows, masked slots (nullptr) included: the softmax sums over
// every slot and how the slots fall decides the order of that sum. Positions
// of a prompt of prefill_len tokens get the rows of the reference's one-shot
// prefill of that prompt, later positions those of its decode step.
template <typename KeyAt, typename RowAt>
void attention_slots(const ModelConfig& c, const AttentionWeights& w, int64_t t, int64_t prefill_len,
                     const std::vector<int32_t>* picked, KeyAt key_at, RowAt compressed_row,
                     std::vector<const uint8_t*>* slots) {
  const int64_t win = c.window_size;
  const bool prefill = t < prefill_len;
  slots->clear();
  // Window: the last `win` positions, oldest first, padded to the row length.
  const int64_t window_len = prefill ? std::min(prefill_len, win) : win;
  for (int64_t p = std::max<int64_t>(0, t - win + 1); p <= t; ++p) slots->push_back(key_at(p));
  slots->resize(window_len, nullptr);
  if (!w.ratio) return;
  const int64_t visible = (t + 1) / w.ratio;
  if (picked) {  // the indexer's choice, best first
    for (int32_t j : *picked) slots->push_back(j >= 0 ? compressed_row(j) : nullptr);
  } else {  // every finished row; the one-shot prefill lists all P / ratio rows
    const int64_t len = prefill ? prefill_len / w.ratio : visible;
    for (int64_t j = 0; j < len; ++j) slots->push_back(j < visible ? compressed_row(j) : nullptr);
  }
}

// The reference's inverse RoPE on the output heads [o, o + group * hd) of
// the token at position t: the attention task that computed them does it,
// while they are in cache, instead of a job of its own.
void derotate_heads(const Rope& rope, float* o, int64_t group, int hd, int rd, int64_t t) {
  thread_local Buffer cos, sin;
  cos.resize(rd / 2);
  sin.resize(rd / 2);
  rope.angles(t, cos.data(), sin.data());
  for (int64_t h = 0; h < group; ++h) kernels::rope(o + h * hd + hd - rd, cos.data(), sin.data(), rd / 2, true);
}

// One query row's attention when the rows are too few to give every
// thread a group of heads (decode on a many-core node): the row's key
// slots and its query rows' place.
struct SlotAttention {
  int64_t row = 0, pos = 0;
  std::vector<const uint8_t*> slots;
};

// Attends each row in two jobs: the scores of 16 heads against a block of
// the row's slots a task, then the weights and weighted sum of a few heads
// over a block of the output's dimensions a task (the task holding the
// RoPE dimensions de-rotates them). The same bits as a task per head group
// (kernels.h), without a task that decodes every key row for one head.
void attend_in_blocks(const LayerContext& ctx, const AttentionWeights& w, const float* q,
                      const std::vector<SlotAttention>& rows, float scale, float* o) {
  const ModelConfig& c = ctx.config;
  const int64_t heads = static_cast<int64_t>(w.attn_sink.size()), hd = c.head_dim, rd = c.rope_head_dim;
  const kernels::KvRowFormat kv_format{hd - rd, rd};
  const auto n = static_cast<int64_t>(rows.size());
  const int64_t threads = ThreadPool::current().num_threads(), head_panels = (heads + kernels::kPanel - 1) / kernels::kPanel;
  int64_t all_slots = 0;
  for (const SlotAttention& r : rows) all_slots += static_cast<int64_t>(r.slots.size());
  // Slots a score task takes: two key tiles, or one when that leaves
  // threads idle (each slot's key row is decoded once a task).
  const int64_t slot_block =
      all_slots * head_panels / (2 * kernels::kKeyTile) >= threads ? 2 * kernels::kKeyTile : kernels::kKeyTile;
  std::vector<int64_t> score_at(n + 1, 0);
  struct Task {
    int64_t row, first_head, first;  // first slot, or first dimension
  };
  std::vector<Task> score_tasks;
  for (int64_t v = 0; v < n; ++v) {
    const auto slots = static_cast<int64_t>(rows[v].slots.size());
    score_at[v + 1] = score_at[v] + heads * slots;
    for (int64_t h0 = 0; h0 < heads; h0 += kernels::kPanel)
      for (int64_t j0 = 0; j0 < slots; j0 += slot_block) score_tasks.push_back({v, h0, j0});
  }
  Buffer scores(score_at[n]);
  parallel_for(static_cast<int64_t>(score_tasks.size()), 1, [&](int64_t t0, int64_t t1) {
    thread_local Buffer scratch;
    scratch.resize(kernels::sink_attention_scratch(0, 0, hd));
    for (int64_t t = t0; t < t1; ++t) {
      const Task& task = score_tasks[t];
      const SlotAttention& r = rows[task.row];
      const auto slots = static_cast<int64_t>(r.slots.size());
      ctx.k.sink_scores(q + (r.row * heads + task.first_head) * hd, std::min<int64_t>(kernels::kPanel, heads - task.first_head),
                        r.slots.data() + task.first, std::min(slot_block, slots - task.first), kv_format, scale,
                        scratch.data(), scores.data() + score_at[task.row] + task.first_head * slots + task.first, slots);
    }
  });
  // Heads and dimensions a sum takes: 16 heads and 128 dimensions, fewer
  // while that leaves threads idle, but at least 4 heads (a task decodes
  // its dimensions of every slot's row once for its heads) and 64
  // dimensions holding the RoPE tail whole (the task that de-rotates it
  // must hold it all).
  int64_t group = kernels::kPanel, width = hd % 128 == 0 && rd <= 128 ? 128 : hd;
  auto sum_tasks_of = [&] { return n * ((heads + group - 1) / group) * (hd / width); };
  while (sum_tasks_of() < threads) {
    if (group > 4) group /= 2;
    else if (width == 128 && rd <= 64) width = 64;
    else break;
  }
  std::vector<Task> sum_tasks;
  for (int64_t v = 0; v < n; ++v)
    for (int64_t h0 = 0; h0 < heads; h0 += group)
      for (int64_t d0 = 0; d0 < hd; d0 += width) sum_tasks.push_back({v, h0, d0});
  parallel_for(static_cast<int64_t>(sum_tasks.size()), 1, [&](int64_t t0, int64_t t1) {
    thread_local Buffer scratch;
    for (int64_t t = t0; t < t1; ++t) {
      const Task& task = sum_tasks[t];
      const SlotAttention& r = rows[task.row];
      const auto slots = static_cast<int64_t>(r.slots.size());
      const int64_t g = std::min(group, heads - task.first_head);
      scratch.resize(kernels::sink_attention_scratch(g, slots, hd));
      float* out = o + (r.row * heads + task.first_head) * hd;
      ctx.k.sink_weighted_sum(scores.data() + score_at[task.row] + task.first_head * slots, g, slots, r.slots.data(),
                              slots, kv_format, &w.attn_sink[task.first_head], task.first, task.first + width,
                              scratch.data(), out + task.first, hd);
      if (task.first + width == hd) derotate_heads(ctx.rope, out, g, hd, rd, r.pos);
    }
  });
}

// q [rows, heads, head_dim] from qr [rows, q_lora_rank], wq_a's output:
// q_norm on qr (in place), wq_b (with `also`, products of the normed qr, in
// the same job), then a weightless RMS norm and RoPE per head.
void queries_from(const AttentionWeights& w, const LayerContext& ctx, int64_t rows, const std::vector<int64_t>& pos,
                  Buffer& qr, Buffer& q, std::vector<LinearProduct> also = {}) {
  const ModelConfig& c = ctx.config;
  const int heads = static_cast<int>(w.attn_sink.size()), hd = c.head_dim, rd = c.rope_head_dim;
  q.resize(rows * heads * hd);
  parallel_for(rows, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      kernels::rms_norm(&qr[r * c.q_lora_rank], w.q_norm.data(), c.q_lora_rank, c.norm_eps, &qr[r * c.q_lora_rank]);
  });
  // Each head normed and rotated: at decode in wq_b's job, as soon as it
  // is written; otherwise in a job of its own.
  auto norm_and_rotate = [&](int64_t v) {
    kernels::rms_norm(&q[v * hd], nullptr, hd, c.norm_eps, &q[v * hd]);
    rope_vector(ctx.rope, &q[v * hd], hd, rd, pos[v / heads], false);
  };
  const bool in_product = rows <= kStepInProductRows;
  const WhenPiecesWritten head_written(in_product ? rows : 0, heads * hd, hd, 1,
                                       [&](int64_t r, int64_t j0, int64_t) { norm_and_rotate(r * heads + j0 / hd); });
  also.push_back({&w.wq_b, qr.data(), rows, q.data(), in_product ? head_written.written() : nullptr});
  linear_forward_all(ctx.k, also);
  if (!in_product) for_vectors(rows * heads, norm_and_rotate);
}

// The single KV head from kv [rows, head_dim], wkv's output: norm, RoPE,
// and the non-RoPE dims through FP8 as the cache stores them (the
// reference's QAT rounding).
void kv_rows_from(const LayerContext& ctx, const AttentionWeights& w, float* kv, int64_t rows,
                  const std::vector<int64_t>& pos, uint8_t* kv_rows) {
  const ModelConfig& c = ctx.config;
  const int hd = c.head_dim, rd = c.rope_head_dim;
  const kernels::KvRowFormat kv_format{hd - rd, rd};
  const int64_t kv_bytes = kv_format.bytes();
  rope_tail(
      ctx.rope, kv, rows, hd, rd, [&](int64_t r) { return pos[r]; }, false,
      [&](int64_t r) { kernels::rms_norm(&kv[r * hd], w.kv_norm.data(), hd, c.norm_eps, &kv[r * hd]); },
      [&](int64_t r) { ctx.k.store_kv_row(&kv[r * hd], kv_format, &kv_rows[r * kv_bytes]); });
}

}  // namespace

void attention_kv_rows(const AttentionWeights& w, const LayerContext& ctx, const float* x, int64_t rows,
                       const std::vector<int64_t>& pos, uint8_t* kv_rows) {
  Buffer kv(rows * ctx.config.head_dim);
  linear_columns(ctx.k, w.wkv, ctx.tp, x, rows, kv.data());
  kv_rows_from(ctx, w, kv.data(), rows, pos, kv_rows);
}

void attention_output(const AttentionWeights& w, const LayerContext& ctx, const float* o, int64_t rows, float* out) {
  const ModelConfig& c = ctx.config;
  const int heads = static_cast<int>(w.attn_sink.size()), hd = c.head_dim;
  // The grouped low-rank projection of the de-rotated output.
  Collectives* tp = ctx.tp && ctx.tp->size() > 1 ? ctx.tp : nullptr;
  const int tp_size = tp ? tp->size() : 1, tp_rank = tp ? tp->rank() : 0;
  const int64_t olr = c.o_lora_rank, G = c.o_groups, gl = static_cast<int64_t>(w.wo_a.size());
  const int64_t group_heads = c.n_heads / G, group_in = group_heads * hd;
  // The heads my groups read: my own, or, when a group spans several ranks,
  // the whole group's gathered from the tensor-parallel group.
  const float* oin = o;
  int64_t oheads = heads, first_head = 0;
  Buffer ofull;
  if (heads < group_heads) {
    ofull.resize(rows * c.n_heads * hd);
    gather_columns(tp, TokenSplit::of(rows, tp), o, heads * hd, ofull.data());
    oin = ofull.data();
    oheads = c.n_heads;
    first_head = tp_rank / (tp_size / G) * group_heads;
  }
  // Each group's heads as its own rows, every group's wo_a in one job. One
  // row (decode) is laid out so already: each group reads its heads in o
  // and writes its part of og's row.
  const bool one_row = rows == 1;
  Buffer og(rows * gl * olr), ogroups(one_row ? 0 : gl * rows * olr), xin(one_row ? 0 : gl * rows * group_in);
  if (!one_row)
    parallel_copy(
        rows * gl, group_in,
        [&](int64_t i) { return oin + (i / gl * oheads + first_head) * hd + i % gl * group_in; },
        [&](int64_t i) { return &xin[(i % gl * rows + i / gl) * group_in]; });
  std::vector<LinearProduct> groups;
  for (int64_t gi = 0; gi < gl; ++gi) {
    if (one_row) groups.push_back({&w.wo_a[gi], oin + first_head * hd + gi * group_in, 1, og.data() + gi * olr});
    else groups.push_back({&w.wo_a[gi], xin.data() + gi * rows * group_in, rows, ogroups.data() + gi * rows * olr});
  }
  linear_forward_all(ctx.k, groups);
  if (!one_row)
    parallel_copy(
        rows * gl, olr, [&](int64_t i) { return &ogroups[(i % gl * rows + i / gl) * olr]; },
        [&](int64_t i) { return &og[i * olr]; });
  if (!tp) {
    linear_forward(ctx.k, w.wo_b, og.data(), rows, out);
    return;
  }
  // wo_b and its FP8 input rounding see whole rows: gather every group's
  // output, then this rank computes its share of wo_b's output features.
  // With a group a rank or more, the gathered rows are those rows already
  // (rank r's groups after rank r - 1's); with fewer, each group is taken
  // once, from the first rank holding it.
  Buffer all(rows * gl * olr * tp_size), full(G >= tp_size ? 0 : rows * G * olr);
  gather_columns(tp, TokenSplit::of(rows, tp), og.data(), gl * olr, all.data());
  if (G >= tp_size) return linear_forward(ctx.k, w.wo_b, all.data(), rows, out);
  const int64_t stride = gl * olr * tp_size, per_group = tp_size / G;
  parallel_copy(
      rows * G, olr, [&](int64_t i) { return &all[i / G * stride + i % G * per_group * gl * olr]; },
      [&](int64_t i) { return &full[i * olr]; });
  linear_forward(ctx.k, w.wo_b, full.data(), rows, out);
}

void dspark_attention_forward(const AttentionWeights& w, const LayerContext& ctx, const std::vector<DSparkAttendCall>& calls,
                              int64_t block, const float* x, float* out) {
  PhaseTimer::Scope time(Phase::kAttention);
  const ModelConfig& c = ctx.config;
  const int heads = static_cast<int>(w.attn_sink.size()), hd = c.head_dim, rd = c.rope_head_dim;
  const int64_t rows = static_cast<int64_t>(calls.size()) * block;
  std::vector<int64_t> pos(rows);
  for (size_t i = 0; i < calls.size(); ++i)
    for (int64_t k = 0; k < block; ++k) pos[i * block + k] = calls[i].first_pos + k;
  Buffer qr(rows * c.q_lora_rank), kv(rows * hd), q;
  linear_columns_all(ctx.k, ctx.tp, {{&w.wq_a, x, rows, qr.data()}, {&w.wkv, x, rows, kv.data()}});
  queries_from(w, ctx, rows, pos, qr, q);
  const kernels::KvRowFormat kv_format{hd - rd, rd};
  const int64_t kv_bytes = kv_format.bytes();
  ScratchVector<uint8_t> kv_rows(rows * kv_bytes);
  kv_rows_from(ctx, w, kv.data(), rows, pos, kv_rows.data());
  // Every block row attends the ring's filled slots in slot order, then all
  // the call's block rows (the reference's index list, the same for each).
  Buffer o(rows * heads * hd);
  const float scale = static_cast<float>(std::pow(hd, -0.5));
  const int64_t per_task = heads_per_task(block, heads), head_groups = (heads + per_task - 1) / per_task;
  for (size_t i = 0; i < calls.size(); ++i) {
    const DSparkAttendCall& call = calls[i];
    std::vector<const uint8_t*> slots = call.ring;
    for (int64_t k = 0; k < block; ++k) slots.push_back(&kv_rows[(i * block + k) * kv_bytes]);
    parallel_for(block * head_groups, 1, [&](int64_t v0, int64_t v1) {
      thread_local Buffer scratch;
      for (int64_t v = v0; v < v1; ++v) {
        const int64_t k = v / head_groups, h0 = v % head_groups * per_task;
        const int64_t group = std::min<int64_t>(per_task, heads - h0);
        const auto need = static_cast<size_t>(kernels::sink_attention_scratch(group, static_cast<int64_t>(slots.size()), hd));
        if (scratch.size() < need) scratch.resize(need);
        const int64_t row = static_cast<int64_t>(i) * block + k;
        ctx.k.sink_attention_heads(&q[(row * heads + h0) * hd], group, slots.data(), slots.size(), kv_format,
                                   &w.attn_sink[h0], scale, scratch.data(), &o[(row * heads + h0) * hd]);
        derotate_heads(ctx.rope, &o[(row * heads + h0) * hd], group, hd, rd, pos[row]);
      }
    });
  }
  attention_output(w, ctx, o.data(), rows, out);
}

void attention_forward(const AttentionWeights& w, const LayerContext& ctx, const std::vector<SeqChunk>& chunks,
                       const float* x, int64_t rows, float* out) {
  PhaseTimer::Scope time(Phase::kAttention);
  const ModelConfig& c = ctx.config;
  const Rope& rope = ctx.rope;
  // This rank's query heads (all of them without tensor parallelism).
  const int heads = static_cast<int>(w.attn_sink.size()), hd = c.head_dim, rd = c.rope_head_dim, win = c.window_size;
  const std::vector<int64_t> pos = row_positions(chunks, rows);

  // Every product of x in one job: queries' wq_a, the KV head, the
  // compressors' projections and the indexer's head weights.
  const int ih = w.indexer ? static_cast<int>(w.indexer->weights_proj.out) : 0, id = c.index_head_dim;
  Buffer qr(rows * c.q_lora_rank), kv(rows * hd), q, iq, iw(rows * ih);
  CompressorInputs compressed, index_keys;
  std::vector<LinearProduct> columns{{&w.wq_a, x, rows, qr.data()}, {&w.wkv, x, rows, kv.data()}}, local;
  if (w.compressor) compressed.add(*w.compressor, ctx, x, rows, &columns);
  if (w.indexer) {
    index_keys.add(w.indexer->compressor, ctx, x, rows, &columns);
    local.push_back({&w.indexer->weights_proj, x, rows, iw.data()});
  }
  linear_columns_all(ctx.k, ctx.tp, columns, local);
  // The indexer's queries come from the normed qr too, in wq_b's job.
  // Its queries rotated, Hadamard-mixed and through FP4: at decode there,
  // each as soon as it is written; otherwise in a job of their own.
  auto finish_index_query = [&](int64_t v) {
    float* iv = &iq[v * id];
    rope_vector(rope, iv, id, rd, pos[v / ih], false);
    thread_local Buffer scratch;
    scratch.resize(id);
    ctx.k.hadamard(iv, id, scratch.data());
    ctx.k.fp4_round_trip(iv, id, kernels::kIndexScaleBlock);
  };
  const bool index_queries_in_product = rows <= kStepInProductRows;
  std::vector<LinearProduct> with_wq_b;
  std::optional<WhenPiecesWritten> index_query_written;
  if (w.indexer) {
    iq.resize(rows * ih * id);
    index_query_written.emplace(index_queries_in_product ? rows : 0, ih * id, id, 1,
                                [&](int64_t r, int64_t j0, int64_t) { finish_index_query(r * ih + j0 / id); });
    with_wq_b.push_back({&w.indexer->wq_b, qr.data(), rows, iq.data(),
                         index_queries_in_product ? index_query_written->written() : nullptr});
  }
  queries_from(w, ctx, rows, pos, qr, q, with_wq_b);
  const kernels::KvRowFormat kv_format{hd - rd, rd};
  const int64_t kv_bytes = kv_format.bytes();
  ScratchVector<uint8_t> kv_rows(rows * kv_bytes);
  kv_rows_from(ctx, w, kv.data(), rows, pos, kv_rows.data());

  // Compressed history (rows finished by this chunk are visible to it).
  if (w.compressor) run_compressor(*w.compressor, ctx, compressed, chunks, false);

  // The indexer's head weights.
  if (w.indexer) {
    PhaseTimer::Scope time(Phase::kIndexer);
    if (!index_queries_in_product) for_vectors(rows * ih, finish_index_query);
    // Computed in double and rounded once, as the reference's Python scalars.
    const float wscale = static_cast<float>(std::pow(id, -0.5) * std::pow(c.index_n_heads, -0.5));
    for (float& v : iw) v *= wscale;
    run_compressor(w.indexer->compressor, ctx, index_keys, chunks, true);
  }

  // Sparse attention: window keys then compressed rows. The indexer picks
  // for every chunk at once (its collectives run in the same order on
  // every rank), then one job attends every chunk's tokens.
  Buffer o(rows * heads * hd);
  const float scale = static_cast<float>(std::pow(hd, -0.5));
  const int layer = ctx.cache_layer;
  std::vector<std::vector<std::vector<int32_t>>> picked(chunks.size());
  if (w.indexer) {
    PhaseTimer::Scope time(Phase::kIndexer);
    const IndexerShape shape{ih, id, c.index_topk, w.ratio};
    std::vector<std::vector<const uint8_t*>> keys(chunks.size());
    std::vector<IndexerRows> seqs;
    for (size_t ci = 0; ci < chunks.size(); ++ci) {
      const SeqChunk& ch = chunks[ci];
      keys[ci].resize((ch.start_pos + ch.num_tokens) / w.ratio);
      for (size_t j = 0; j < keys[ci].size(); ++j) keys[ci][j] = ch.cache->index_row(layer, j);
      seqs.push_back({iq.data() + ch.row_begin * ih * id, iw.data() + ch.row_begin * ih, keys[ci].data(), ch.start_pos,
                      ch.num_tokens, ch.prefill_len, &picked[ci]});
    }
    indexer_select(ctx.k, shape, seqs, ctx.tp);
  }
  auto key_at = [&](const SeqChunk& ch, int64_t p) -> const uint8_t* {
    return p < ch.start_pos ? ch.cache->window_row(layer, p) : &kv_rows[(ch.row_begin + p - ch.start_pos) * kv_bytes];
  };
  auto slots_of = [&](const SeqChunk& ch, size_t ci, int64_t i, std::vector<const uint8_t*>* slots) {
    attention_slots(
        c, w, ch.start_pos + i, ch.prefill_len, w.indexer ? &picked[ci][i] : nullptr,
        [&](int64_t p) { return key_at(ch, p); },
        [&](int64_t j) -> const uint8_t* { return ch.cache->compressed_row(layer, j); }, slots);
  };
  // Attends the tokens of chunks [c0, c1): a task per token and group of
  // heads (the group shares the token's key slots), or, when the tokens are
  // too few for that to keep the pool busy, each token cut along its slots
  // and its output dimensions.
  auto attend = [&](size_t c0, size_t c1) {
    std::vector<std::pair<size_t, int64_t>> tokens;  // (chunk, token in it)
    for (size_t ci = c0; ci < c1; ++ci)
      for (int64_t i = 0; i < chunks[ci].num_tokens; ++i) tokens.emplace_back(ci, i);
    const int64_t n = static_cast<int64_t>(tokens.size());
    if (n * ((heads + kernels::kPanel - 1) / kernels::kPanel) < ThreadPool::current().num_threads()) {
      std::vector<SlotAttention> split(n);
      for (int64_t v = 0; v < n; ++v) {
        const auto [ci, i] = tokens[v];
        const SeqChunk& ch = chunks[ci];
        split[v].row = ch.row_begin + i;
        split[v].pos = ch.start_pos + i;
        slots_of(ch, ci, i, &split[v].slots);
      }
      attend_in_blocks(ctx, w, q.data(), split, scale, o.data());
    } else {
      // Enough tokens for a group of at least 16 heads a thread.
      const int64_t per_task = heads_per_task(n, heads), head_groups = (heads + per_task - 1) / per_task;
      parallel_for(n * head_groups, 1, [&](int64_t v0, int64_t v1) {
        // Per thread and kept: one task per token would otherwise allocate
        // and zero its scratch every time.
        thread_local std::vector<const uint8_t*> slots;
        thread_local Buffer scratch;
        for (int64_t v = v0; v < v1; ++v) {
          const auto [ci, i] = tokens[v / head_groups];
          const SeqChunk& ch = chunks[ci];
          const int64_t h0 = v % head_groups * per_task, t = ch.start_pos + i;
          const int64_t group = std::min<int64_t>(per_task, heads - h0);
          slots_of(ch, ci, i, &slots);
          const auto need = static_cast<size_t>(kernels::sink_attention_scratch(group, static_cast<int64_t>(slots.size()), hd));
          if (scratch.size() < need) scratch.resize(need);
          const int64_t row = ch.row_begin + i;
          ctx.k.sink_attention_heads(&q[(row * heads + h0) * hd], group, slots.data(), slots.size(), kv_format,
                                     &w.attn_sink[h0], scale, scratch.data(), &o[(row * heads + h0) * hd]);
          derotate_heads(ctx.rope, &o[(row * heads + h0) * hd], group, hd, rd, t);
        }
      });
    }
    // Only now the rings may take these chunks' keys: their queries read
    // them. Rows a prefix-cache block holds already are not written again.
    for (size_t ci = c0; ci < c1; ++ci) {
      const SeqChunk& ch = chunks[ci];
      const int64_t end = ch.start_pos + ch.num_tokens;
      const int64_t from =
          std::max(ch.cached_until, ch.keep_all_window_rows ? ch.start_pos : std::max(ch.start_pos, end - win));
      for (int64_t p = from; p < end; ++p) std::memcpy(ch.cache->window_row(layer, p), key_at(ch, p), kv_bytes);
    }
  };
  // Chunks of distinct sequences share a job; a sequence's second chunk
  // waits for its first to write its ring.
  for (size_t c0 = 0; c0 < chunks.size();) {
    size_t c1 = c0 + 1;
    while (c1 < chunks.size() && std::none_of(chunks.begin() + c0, chunks.begin() + c1,
                                              [&](const SeqChunk& x) { return x.cache == chunks[c1].cache; }))
      ++c1;
    attend(c0, c1);
    c0 = c1;
  }

  attention_output(w, ctx, o.data(), rows, out);
}

}  // namespace dsv4
