#include "model/v41_attention.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "base/phase_timer.h"
#include "base/scratch.h"
#include "base/thread_pool.h"
#include "kernels/cache_rows.h"
#include "kernels/dispatch.h"
#include "kernels/kernels.h"
#include "model/token_split.h"
#include "ops/norm.h"
#include "ops/topk.h"

namespace dsv4 {
namespace {

using Buffer = std::vector<float>;


// One position's RoPE angles, for every vector rotated at it.
struct Angles {
  Buffer cos, sin;
  Angles(const Rope& rope, int64_t pos) : cos(rope.pairs()), sin(rope.pairs()) {
    rope.angles(pos, cos.data(), sin.data());
  }
  // RoPE on the last 2 * pairs values of each of `count` vectors of `size`.
  void rotate(float* v, int64_t count, int64_t size, bool inverse = false) const {
    const int64_t pairs = static_cast<int64_t>(cos.size());
    for (int64_t i = 0; i < count; ++i)
      kernels::rope(v + i * size + size - 2 * pairs, cos.data(), sin.data(), pairs, inverse);
  }
};


// The latest source at or before `layer`.
int latest_at_or_before(const std::vector<int>& sources, int layer) {
  int best = -1;
  for (int s : sources)
    if (s <= layer) best = std::max(best, s);
  return best;
}

// Whether KV source `o` has a compressed latent in the reference's forward
// that computes position t (it then publishes its index keys): a one-shot
// prefill of P tokens when t < P, else the decode step at t. `before`: in
// the forward before that one.
bool publishes(const ModelConfig& c, int o, int64_t t, int64_t prefill_len, bool before) {
  const int r = c.compress_ratio(o);
  if (before) return t == prefill_len ? prefill_len >= r : t % r == 0;
  return t < prefill_len ? prefill_len >= r : (t + 1) % r == 0;
}

// Whose index keys the indexer of `layer` scores at position t. The
// reference keeps one shared slot, republished only by a source whose group
// just closed: on a decode step where a ratio-2 source's group is still
// open, it and the index sources after it read the keys the last publisher
// left, which is the ratio-1 source's from the step before. The goldens keep
// what the reference computes, so this does too.
int key_source(const ModelConfig& c, int layer, int64_t t, int64_t prefill_len) {
  const std::vector<int>& owners = c.shared.kv_source_layers;
  for (auto it = owners.rbegin(); it != owners.rend(); ++it)
    if (*it <= layer && publishes(c, *it, t, prefill_len, false)) return *it;
  for (auto it = owners.rbegin(); it != owners.rend(); ++it)
    if (publishes(c, *it, t, prefill_len, true)) return *it;
  return -1;
}

// Level one of the two-level top-k: per query, the candidate_topk_blocks
// blocks of candidate_block_size positions with the best position score
// (the block of its newest reachable position always in), as a mask.
std::vector<uint8_t> candidate_blocks(const SharedSources& s, const float* score, int64_t width, int64_t visible) {
  const int64_t bs = s.candidate_block_size, blocks = (width + bs - 1) / bs;
  Buffer block_score(blocks, -INFINITY);
  for (int64_t j = 0; j < width; ++j) block_score[j / bs] = std::fmax(block_score[j / bs], score[j]);
  const int64_t last = visible > 0 ? (visible - 1) / bs : -1;  // (compress_lens - 1) // block_size
  if (last >= 0 && last < blocks) block_score[last] = INFINITY;
  const int64_t k = std::min<int64_t>(s.candidate_topk_blocks, blocks);
  std::vector<int32_t> top(k);
  topk_like_torch(block_score.data(), blocks, k, top.data());
  std::vector<uint8_t> keep_block(blocks, 0), mask(width);
  for (int32_t b : top) keep_block[b] = block_score[b] > -INFINITY;
  for (int64_t j = 0; j < width; ++j) mask[j] = keep_block[j / bs];
  return mask;
}

struct IndexerInputs {
  const float* q;        // [heads, head_dim], rotated and FP4-rounded
  const float* weights;  // [heads]
};

// Rows [0, n) of a cache layer's index keys, decoded.
Buffer decode_keys(SequenceCache* cache, int layer, int64_t n, int64_t dim) {
  Buffer out(n * dim);
  parallel_for(n, 16, [&](int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j) kernels::load_index_row(cache->index_row(layer, j), dim, &out[j * dim]);
  });
  return out;
}

// The indexer of `layer` for the row at position t: the compressed rows it
// picks (ascending, -1 for an unreachable pick).
// keys_of: each KV source's index keys, decoded (key_source picks one).
std::vector<int32_t> index_row(const V41LayerContext& ctx, const V41Chunk& ch, int64_t t, const IndexerInputs& in,
                               const std::map<int, Buffer>& keys_of, V41Shared* shared, int64_t row) {
  const ModelConfig& c = ctx.config;
  const SharedSources& s = c.shared;
  const int ratio = c.compress_ratio(ctx.layer), heads = c.index_n_heads, id = c.index_head_dim;
  const int64_t P = ch.prefill_len;
  const bool prompt = t < P;
  const int64_t width = (prompt ? P : t + 1) / ratio, visible = (t + 1) / ratio;
  if (width == 0) return {};
  const auto source = keys_of.find(key_source(c, ctx.layer, t, P));
  if (source == keys_of.end()) return {};  // no source has published keys
  const Buffer& keys = source->second;
  Buffer terms(static_cast<size_t>(heads) * width, 0.0f), score(width, -INFINITY);
  // Each key's score is its own (a decode row's thousands of keys in a
  // job; a prefill chunk's rows already run in one, and this runs inline).
  parallel_for(visible, 16, [&](int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j) {
      const float* k = &keys[j * id];
      for (int h = 0; h < heads; ++h)
        terms[h * width + j] = std::fmax(kernels::dot(in.q + h * id, k, id), 0.0f) * in.weights[h];
      score[j] = kernels::sum_outer(&terms[j], heads, width);
    }
  });
  if (ctx.layer == s.candidate_source_layer) {
    shared->candidates[row] = candidate_blocks(s, score.data(), width, visible);
  } else if (s.candidate_source_layer >= 0 && ctx.layer > s.candidate_source_layer) {
    const std::vector<uint8_t>& cand = shared->candidates[row];
    for (int64_t j = 0; j < width; ++j)
      if (!cand[j]) score[j] = -INFINITY;
  }
  const int64_t k = std::min<int64_t>(c.index_topk, width);
  std::vector<int32_t> top(k);
  topk_like_torch(score.data(), width, k, top.data());
  std::sort(top.begin(), top.end());
  for (int32_t& j : top)
    if (j >= visible) j = -1;
  return top;
}

// A KV source's compressor over a chunk: each closed group's latent
// (pooled, normed), then its index key (owner) and its compressed row.
void compress_chunk(const V41Attention& w, const V41LayerContext& ctx, const V41Chunk& ch, const float* x) {
  const ModelConfig& c = ctx.config;
  const V41Compressor& comp = *w.compressor;
  const int ratio = comp.ratio;
  const int64_t hd = c.head_dim, id = c.index_head_dim, dim = c.dim;
  SequenceCache& cache = *ch.cache;
  const int64_t n = ch.num_tokens;
  Buffer kv_all(n * hd), score_all(ratio > 1 ? n * hd : 0), latent(hd), key(id), e(ratio);
  v41_linear_columns(comp.wkv, ctx.tp, x + ch.row_begin * dim, n, kv_all.data());
  if (ratio > 1) v41_linear_columns(comp.wgate, ctx.tp, x + ch.row_begin * dim, n, score_all.data());
  // The open group: kv and score rows in a ring of slots by position.
  const CompressorStateView group = ratio > 1 ? cache.compressor_state(ctx.layer) : CompressorStateView{};
  for (int64_t i = 0; i < n; ++i) {
    const int64_t t = ch.start_pos + i;
    const float* kv = &kv_all[i * hd];
    if (ratio == 1) {
      std::copy_n(kv, hd, latent.begin());
    } else {
      std::copy_n(kv, hd, group.kv + (t % group.slots) * hd);
      std::copy_n(&score_all[i * hd], hd, group.score + (t % group.slots) * hd);
      if ((t + 1) % ratio) continue;
      // softmax over the group's rows per channel, then the weighted sum.
      std::vector<const float*> gk(ratio), gs(ratio);
      for (int r = 0; r < ratio; ++r) {
        const int64_t slot = (t + 1 - ratio + r) % group.slots;
        gk[r] = group.kv + slot * hd;
        gs[r] = group.score + slot * hd;
      }
      for (int64_t d = 0; d < hd; ++d) {
        float m = gs[0][d];
        for (int r = 1; r < ratio; ++r) m = std::fmax(m, gs[r][d]);
        float sum = 0.0f;
        for (int r = 0; r < ratio; ++r) sum += (e[r] = kernels::vexp(gs[r][d] - m));
        float acc = 0.0f;
        for (int r = 0; r < ratio; ++r) acc += gk[r][d] * (e[r] / sum);
        latent[d] = acc;
      }
    }
    kernels::rms_norm(latent.data(), comp.norm.data(), hd, c.norm_eps, latent.data());
    const int64_t j = t / ratio;
    const bool write = (j + 1) * ratio > ch.cached_until;  // else its pages are the prefix cache's
    const Angles at(ctx.rope, j * ratio);  // a group takes its first token's position
    if (w.indexer && w.indexer->owns_keys) {
      v41_linear(w.indexer->wk, latent.data(), 1, key.data());
      kernels::rms_norm(key.data(), w.indexer->k_norm.data(), id, c.norm_eps, key.data());
      at.rotate(key.data(), 1, id);
      fp4_round_e8m0(key.data(), id);
      if (write) kernels::store_index_row(key.data(), id, cache.index_row(ctx.layer, j));
    }
    at.rotate(latent.data(), 1, hd);
    fp4_round_e4m3_scaled(latent.data(), hd);
    if (write) kernels::store_v41_compressed_row(latent.data(), hd, cache.compressed_row(ctx.layer, j));
  }
}

std::vector<Angles> angles_at(const Rope& rope, const std::vector<int64_t>& positions) {
  std::vector<Angles> out;
  out.reserve(positions.size());
  for (int64_t p : positions) out.emplace_back(rope, p);
  return out;
}

// The window KV row of each input: norm, RoPE, FP8 over all of it in blocks of 32.
void window_kv_rows(const V41Attention& w, const V41LayerContext& ctx, const std::vector<Angles>& angles,
                    const float* x, int64_t rows, float* kv) {
  const ModelConfig& c = ctx.config;
  const int64_t hd = c.head_dim;
  v41_linear_columns(w.wkv, ctx.tp, x, rows, kv);
  rms_norm_rows(w.kv_norm, c.norm_eps, kv, rows, hd);
  parallel_for(rows, 4, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      angles[r].rotate(&kv[r * hd], 1, hd);
      act_round_e4m3(&kv[r * hd], hd);
    }
  });
}

// This rank's query heads (all of them on one rank).
int local_heads(const V41Attention& w) { return static_cast<int>(w.attn_sink.size()); }

// Queries: wq_a -> q_norm (qr, which the indexer reads too) -> wq_b,
// rotated (no per-head norm in V4.1); q holds this rank's heads.
void queries(const V41Attention& w, const V41LayerContext& ctx, const std::vector<Angles>& angles, const float* x,
             int64_t rows, Buffer* qr, Buffer* q) {
  const ModelConfig& c = ctx.config;
  const int heads = local_heads(w);
  const int64_t hd = c.head_dim, ql = c.q_lora_rank;
  qr->resize(rows * ql);
  q->resize(rows * heads * hd);
  v41_linear_columns(w.wq_a, ctx.tp, x, rows, qr->data());
  rms_norm_rows(w.q_norm, c.norm_eps, qr->data(), rows, ql);
  v41_linear(w.wq_b, qr->data(), rows, q->data());
  for (int64_t r = 0; r < rows; ++r) angles[r].rotate(&(*q)[r * heads * hd], heads, hd);
}

// This rank's heads' outputs o [rows, heads, head_dim] de-rotated, then
// the grouped wo_a (each group its own heads) and wo_b. Over ranks: each
// computes its groups (a group spanning several ranks from its heads
// gathered, by each of them), then every group's output is gathered for
// wo_b, whose features split as its other linears' do.
void output_projection(const V41Attention& w, const V41LayerContext& ctx, const std::vector<Angles>& angles,
                       float* o, int64_t rows, float* out) {
  const ModelConfig& c = ctx.config;
  const int heads = local_heads(w);
  const int64_t hd = c.head_dim, G = c.o_groups, ol = c.o_lora_rank, group_in = c.n_heads * hd / G;
  const int64_t gl = w.wo_a.out / ol;  // groups on this rank
  Collectives* tp = ctx.tp && ctx.tp->size() > 1 ? ctx.tp : nullptr;
  for (int64_t r = 0; r < rows; ++r) angles[r].rotate(&o[r * heads * hd], heads, hd, /*inverse=*/true);
  const float* oin = o;
  int64_t oheads = heads, first_head = 0;
  Buffer ofull;
  if (heads * hd < group_in) {
    const int64_t ranks_per_group = tp->size() / G;
    ofull.resize(rows * c.n_heads * hd);
    gather_columns(tp, TokenSplit::of(rows, tp), o, heads * hd, ofull.data());
    oin = ofull.data();
    oheads = c.n_heads;
    first_head = tp->rank() / ranks_per_group * (c.n_heads / G);
  }
  Buffer og(rows * gl * ol);
  // og[r, j] = its group's heads of row r . wo_a row j, added left to right
  // (j = g * ol + k, g this rank's): sixteen j of one group at a time, a
  // lane each (kernels' v41_block), or one dot each.
  const int64_t lanes = kernels::kPanel, row_stride = oheads * hd;
  const float* first_in = rows ? oin + first_head * hd : nullptr;
  if (rows == 0) {
    // Nothing of this rank's to compute (its buffers may be null); the
    // gathers below still run with the group.
  } else if (w.wo_a.packed()) {
    // Fast numerics: each group's inputs as rows of their own, then the
    // group's panels (whole: ol is a multiple of kPanel).
    const kernels::Kernels& k = kernels::kernels_for(kernels::Numerics::kFast);
    const int64_t panels = ol / lanes;
    Buffer a(rows * group_in);
    for (int64_t g = 0; g < gl; ++g) {
      for (int64_t r = 0; r < rows; ++r) std::copy_n(first_in + r * row_stride + g * group_in, group_in, &a[r * group_in]);
      parallel_for(panels, 1, [&](int64_t p0, int64_t p1) {
        linear_panels(k, w.wo_a.panels, a.data(), rows, g * panels + p0, g * panels + p1, og.data(), gl * ol);
      });
    }
  } else if (ol % lanes == 0) {
    const kernels::Kernels& k = kernels::kernels_for(kernels::Numerics::kExact);
    parallel_for(gl * ol / lanes, 1, [&](int64_t p0, int64_t p1) {
      Buffer tile(V41Linear::kBlock * lanes), acc(rows * lanes);
      for (int64_t p = p0; p < p1; ++p) {
        const int64_t j0 = p * lanes;
        const float* a = first_in + j0 / ol * group_in;
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int64_t i0 = 0; i0 < group_in; i0 += V41Linear::kBlock) {
          const int64_t n = std::min(V41Linear::kBlock, group_in - i0);
          w.wo_a.values_transposed(j0, lanes, i0, n, tile.data(), lanes);
          k.v41_block(a + i0, row_stride, rows, tile.data(), n, nullptr, nullptr, acc.data());
        }
        for (int64_t r = 0; r < rows; ++r) std::copy_n(&acc[r * lanes], lanes, &og[r * gl * ol + j0]);
      }
    });
  } else {
    parallel_for(gl * ol, 1, [&](int64_t j0, int64_t j1) {
      Buffer wrow(group_in);
      for (int64_t j = j0; j < j1; ++j) {
        w.wo_a.row(j, wrow.data());
        for (int64_t r = 0; r < rows; ++r)
          og[r * gl * ol + j] = kernels::dot(first_in + r * row_stride + j / ol * group_in, wrow.data(), group_in);
      }
    });
  }
  if (!tp) {
    v41_linear(w.wo_b, og.data(), rows, out);
    return;
  }
  // Every rank's groups, then group g from the first rank holding it.
  const int T = tp->size();
  Buffer all(rows * gl * ol * T), full(rows * G * ol);
  gather_columns(tp, TokenSplit::of(rows, tp), og.data(), gl * ol, all.data());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < G; ++g) {
      // Rank q's gl groups sit at block q: group g at g, or, when a group
      // spans T / G ranks (gl 1), at its first rank's block.
      const int64_t at = G >= T ? g : g * (T / G);
      std::copy_n(&all[(r * T * gl + at) * ol], ol, &full[(r * G + g) * ol]);
    }
  if (ctx.held) v41_linear_columns_to_rows(w.wo_b, tp, *ctx.held, full.data(), rows, out);
  else v41_linear_columns(w.wo_b, tp, full.data(), rows, out);
}

}  // namespace

int64_t v41_first_row_after_unwritten_keys(const ModelConfig& c, int64_t start_pos, int64_t num_tokens,
                                           int64_t prefill_len) {
  for (int64_t i = 1; i < num_tokens; ++i) {
    const int64_t t = start_pos + i;
    for (int layer : c.shared.index_source_layers) {
      const int src = key_source(c, layer, t, prefill_len);
      if (src <= layer) continue;  // written by this forward already, or before it
      // Rows the indexer reads against rows the source had before the chunk.
      if ((t + 1) / c.compress_ratio(layer) > start_pos / c.compress_ratio(src)) return i;
    }
  }
  return num_tokens;
}

void v41_sparse_attention(kernels::Numerics numerics, const float* q, int heads, int64_t head_dim,
                          const std::vector<const float*>& kv, const float* sinks, float scale, float* out) {
  kernels::kernels_for(numerics)
      .v41_sparse_attention(q, heads, head_dim, kv.data(), static_cast<int64_t>(kv.size()), sinks, scale, out);
}

void v41_window_kv(const V41Attention& w, const V41LayerContext& ctx, const float* x,
                   const std::vector<int64_t>& positions, float* kv) {
  window_kv_rows(w, ctx, angles_at(ctx.rope, positions), x, static_cast<int64_t>(positions.size()), kv);
}

void v41_dspark_attention(const V41Attention& w, const V41LayerContext& ctx, const std::vector<V41DSparkView>& views,
                          int64_t block, const float* x, float* out) {
  const ModelConfig& c = ctx.config;
  const int heads = local_heads(w);
  const int64_t hd = c.head_dim, rows = static_cast<int64_t>(views.size()) * block;
  std::vector<int64_t> positions;
  for (const V41DSparkView& v : views)
    for (int64_t j = 0; j < block; ++j) positions.push_back(v.first_pos + j);
  const std::vector<Angles> angles = angles_at(ctx.rope, positions);
  Buffer qr, q, kv(rows * hd), o(rows * heads * hd);
  queries(w, ctx, angles, x, rows, &qr, &q);
  window_kv_rows(w, ctx, angles, x, rows, kv.data());
  // Every row of a block attends the ring's filled slots in slot order, then
  // the whole block (no causal mask).
  const float scale = static_cast<float>(std::pow(hd, -0.5));
  parallel_for(rows, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t call = r / block;
      std::vector<const float*> slots = views[call].ring;
      for (int64_t j = 0; j < block; ++j) slots.push_back(&kv[(call * block + j) * hd]);
      v41_sparse_attention(ctx.numerics, &q[r * heads * hd], heads, hd, slots, w.attn_sink.data(), scale,
                             &o[r * heads * hd]);
    }
  });
  output_projection(w, ctx, angles, o.data(), rows, out);
}

void v41_attention(const V41Attention& w, const V41LayerContext& ctx, const std::vector<V41Chunk>& chunks,
                   const float* x, int64_t rows, V41Shared* shared, float* out) {
  PhaseTimer::Scope time(Phase::kAttention);
  const ModelConfig& c = ctx.config;
  const int heads = local_heads(w);
  const int64_t hd = c.head_dim, win = c.window_size;
  const int L = ctx.layer;
  std::vector<int64_t> positions;  // each row's
  for (const V41Chunk& ch : chunks)
    for (int64_t i = 0; i < ch.num_tokens; ++i) positions.push_back(ch.start_pos + i);
  const std::vector<Angles> angles = angles_at(ctx.rope, positions);
  Buffer qr, q;
  ScratchVector<float> kv(rows * hd);
  queries(w, ctx, angles, x, rows, &qr, &q);
  window_kv_rows(w, ctx, angles, x, rows, kv.data());

  // Compressed rows and which of them each row attends.
  const bool compressed = w.ratio > 0;
  const int kv_source = compressed ? latest_at_or_before(c.shared.kv_source_layers, L) : -1;
  if (w.compressor) {
    PhaseTimer::Scope compressing(Phase::kCompressor);
    for (const V41Chunk& ch : chunks) compress_chunk(w, ctx, ch, x);
  }
  if (w.indexer) {
    PhaseTimer::Scope indexing(Phase::kIndexer);
    const V41Indexer& ix = *w.indexer;
    const int ih = c.index_n_heads, id = c.index_head_dim;
    Buffer iq(rows * ih * id), iw(rows * ih);
    v41_linear_columns(ix.wq_b, ctx.tp, qr.data(), rows, iq.data());
    v41_linear_columns(ix.weights_proj, ctx.tp, x, rows, iw.data());
    // Computed in double and rounded once, as the reference's Python scalars.
    const float wscale = static_cast<float>(std::pow(id, -0.5) * std::pow(ih, -0.5));
    for (float& v : iw) v *= wscale;
    for (int64_t r = 0; r < rows; ++r) {
      angles[r].rotate(&iq[r * ih * id], ih, id);
      fp4_round_e8m0(&iq[r * ih * id], ih * id);
    }
    for (const V41Chunk& ch : chunks) {
      // The keys each row's source holds, decoded once: as many rows as the
      // chunk's last row sees at this layer's ratio.
      std::map<int, Buffer> keys_of;
      for (int64_t i = 0; i < ch.num_tokens; ++i) {
        const int src = key_source(c, L, ch.start_pos + i, ch.prefill_len);
        if (src >= 0 && !keys_of.count(src))
          keys_of[src] = decode_keys(ch.cache, src, (ch.start_pos + ch.num_tokens) / w.ratio, id);
      }
      parallel_for(ch.num_tokens, 1, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
          const int64_t r = ch.row_begin + i;
          shared->topk[r] =
              index_row(ctx, ch, ch.start_pos + i, {&iq[r * ih * id], &iw[r * ih]}, keys_of, shared, r);
        }
      });
    }
  }

  // Sparse attention: the window (oldest first), then the picked rows.
  ScratchVector<float> o(rows * heads * hd);
  const float scale = static_cast<float>(std::pow(hd, -0.5));
  for (const V41Chunk& ch : chunks) {
    // The window rows before the chunk and the source's compressed rows the
    // chunk may pick, decoded once (rows in parallel: a decode step's are
    // hundreds of rows of one query).
    const int64_t first_prev = std::max<int64_t>(0, ch.start_pos - win + 1);
    ScratchVector<float> prev((ch.start_pos - first_prev) * hd);
    parallel_for(ch.start_pos - first_prev, 16, [&](int64_t a, int64_t b) {
      for (int64_t p = first_prev + a; p < first_prev + b; ++p)
        kernels::load_v41_window_row(ch.cache->window_row(L, p), hd, &prev[(p - first_prev) * hd]);
    });
    // Only the compressed rows the chunk's rows picked, decoded once each.
    ScratchVector<float> comp;
    std::vector<int32_t> where;   // compressed row -> its place in comp (-1: not picked)
    std::vector<int32_t> picked;  // compressed rows, by place in comp
    if (compressed) {
      where.assign((ch.start_pos + ch.num_tokens) / w.ratio, -1);
      for (int64_t r = ch.row_begin; r < ch.row_begin + ch.num_tokens; ++r)
        for (int32_t j : shared->topk[r])
          if (j >= 0 && where[j] < 0) {
            where[j] = static_cast<int32_t>(picked.size());
            picked.push_back(j);
          }
      comp.resize(picked.size() * hd);
      parallel_for(static_cast<int64_t>(picked.size()), 16, [&](int64_t a, int64_t b) {
        for (int64_t i = a; i < b; ++i)
          kernels::load_v41_compressed_row(ch.cache->compressed_row(kv_source, picked[i]), hd, &comp[i * hd]);
      });
    }
    auto window_row = [&](int64_t p) -> const float* {
      return p >= ch.start_pos ? &kv[(ch.row_begin + p - ch.start_pos) * hd] : &prev[(p - first_prev) * hd];
    };
    // A task a row and group of heads: each head's attention is its own, so
    // a decode step's few rows still keep the pool busy (its heads split
    // into as many groups as a row has workers; a group lays out each block
    // of keys once for its heads, so fewer, larger groups when the workers
    // are fewer).
    const int64_t workers = ThreadPool::current().num_threads();
    const int groups = static_cast<int>(std::clamp<int64_t>(workers / std::max<int64_t>(1, ch.num_tokens), 1, heads));
    parallel_for(ch.num_tokens * groups, 1, [&](int64_t u0, int64_t u1) {
      std::vector<const float*> slots;
      for (int64_t u = u0; u < u1; ++u) {
        const int64_t i = u / groups, t = ch.start_pos + i, r = ch.row_begin + i;
        const int h0 = static_cast<int>(u % groups * heads / groups), h1 = static_cast<int>((u % groups + 1) * heads / groups);
        slots.clear();
        if (t < ch.prefill_len) {  // the one-shot prefill's row: -1 past t
          const int64_t first = std::max<int64_t>(0, t - win + 1), width = std::min(ch.prefill_len, win);
          for (int64_t k = 0; k < width; ++k) slots.push_back(first + k <= t ? window_row(first + k) : nullptr);
        } else {  // a decode step's ring, oldest first: -1 while it fills
          for (int64_t k = 0; k < win; ++k) {
            const int64_t p = t - win + 1 + k;
            slots.push_back(p >= 0 ? window_row(p) : nullptr);
          }
        }
        if (compressed)
          for (int32_t j : shared->topk[r]) slots.push_back(j >= 0 ? &comp[static_cast<size_t>(where[j]) * hd] : nullptr);
        v41_sparse_attention(ctx.numerics, &q[(r * heads + h0) * hd], h1 - h0, hd, slots, w.attn_sink.data() + h0,
                             scale, &o[(r * heads + h0) * hd]);
      }
    });
    // The chunk's window rows (its last window's, or all when a prefix
    // cache keeps blocks) go to the cache, not those its shared pages hold.
    const int64_t end = ch.start_pos + ch.num_tokens;
    const int64_t from = std::max(ch.keep_all_window_rows ? ch.start_pos : std::max(ch.start_pos, end - win), ch.cached_until);
    for (int64_t p = from; p < end; ++p) kernels::store_v41_window_row(window_row(p), hd, ch.cache->window_row(L, p));
  }

  output_projection(w, ctx, angles, o.data(), rows, out);
}

}  // namespace dsv4
