// DeepSeek-V4.1's DSpark drafter, as its reference's forward_spec computes
// it (members of DeepseekV41):
//
//   main_x    = main_norm(main_proj(taps)), one row per target position
//   rings     per stage, slot p % window holds the stage's window KV row of
//             main_x_p (kv_norm, RoPE at p, FP8): all of a prefill's rows,
//             then each decode step's before its draft
//   block     [anchor, noise x (K-1)] at positions p+1..p+K, in every hc
//             copy, through the stages (window-only blocks with their own
//             experts, attending the ring's filled slots and the whole block)
//   head      collapsed with the last stage's FFN mix (before the norm: the
//             confidence reads it), norm, the trunk's head; then left to
//             right the Markov bias head(embed[previous token]) and a draw;
//             the confidence proj([hidden ; embed[previous]])
#include <algorithm>
#include <cstring>

#include "kernels/cache_rows.h"
#include "model/deepseek_v41.h"
#include "model/hyper_connection.h"
#include "ops/norm.h"

namespace dsv4 {

Status DeepseekV41::dspark_fill(SequenceCache* cache, const float* taps, int64_t rows, int64_t pos0, bool every_row,
                                std::vector<float>* main_x_out) const {
  if (!weights_->dspark) return invalid_argument("the model has no DSpark drafter");
  const ModelConfig& c = config_;
  const V41DSpark& d = *weights_->dspark;
  const int64_t dim = c.dim, hd = c.head_dim, W = c.window_size;
  // A ring holds the last window of positions; earlier rows would be
  // overwritten before any draft reads them.
  const int64_t from = every_row ? 0 : std::max<int64_t>(0, rows - W), n = rows - from;
  std::vector<float> main_x(n * dim), kv(n * hd);
  v41_linear_columns(d.main_proj, tensor_group_, taps + from * c.dspark_taps() * dim, n, main_x.data());
  rms_norm_rows(d.main_norm, c.norm_eps, main_x.data(), n, dim);
  std::vector<int64_t> positions(n);
  for (int64_t i = 0; i < n; ++i) positions[i] = pos0 + from + i;
  for (int s = 0; s < c.dspark_stages; ++s) {
    const V41LayerContext ctx = layer_context(c.n_layers + s, 0);
    v41_window_kv(d.stages[s].attn, ctx, main_x.data(), positions, kv.data());
    for (int64_t i = 0; i < n; ++i)
      kernels::store_v41_window_row(&kv[i * hd], hd, cache->window_row(c.dspark_cache_layer(s), positions[i]));
  }
  if (main_x_out) *main_x_out = std::move(main_x);
  return Status::Ok();
}

Status DeepseekV41::dspark_draft(const std::vector<DSparkCall>& calls, std::vector<DSparkDraft>* out,
                                 bool details) const {
  if (!weights_->dspark) return invalid_argument("the model has no DSpark drafter");
  const ModelConfig& c = config_;
  const V41DSpark& d = *weights_->dspark;
  const int hc = c.hc_mult;
  const int64_t K = c.dspark_block_size, V = c.vocab_size, dim = c.dim, R = c.dspark_markov_rank, W = c.window_size;
  const int64_t n = static_cast<int64_t>(calls.size()), rows = n * K, flat = hc * dim;
  for (const DSparkCall& call : calls) {
    if (!call.cache || !call.tap) return invalid_argument("a DSpark draft call has no cache or no taps");
    if (call.position < 1) return invalid_argument("a DSpark draft follows a decode step: position must be >= 1");
    if (call.position + 1 + K > c.max_position_embeddings)
      return invalid_argument("a DSpark draft at position " + std::to_string(call.position) +
                              " would run past the model's " + std::to_string(c.max_position_embeddings) + " positions");
    if (call.reference_index < 0 || call.reference_index >= call.reference_batch)
      return invalid_argument("a DSpark draft's reference row is outside its reference batch");
    if (call.anchor < 0 || call.anchor >= V)
      return invalid_argument("DSpark anchor " + std::to_string(call.anchor) + " is outside the vocabulary");
    if (call.forced_prev)
      for (int64_t j = 0; j < K; ++j)
        if (call.forced_prev[j] < 0 || call.forced_prev[j] >= V)
          return invalid_argument("a forced DSpark token is outside the vocabulary");
  }
  std::vector<std::vector<float>> main_x(n);
  for (int64_t i = 0; i < n; ++i)
    DSV4_RETURN_IF_ERROR(
        dspark_fill(calls[i].cache, calls[i].tap, 1, calls[i].position, false, details ? &main_x[i] : nullptr));

  // The block's rows, in every copy; the first stage collapses with copy 0.
  // Row j of a call sits at j of its reference_index in the reference's
  // [reference_batch, K] tensors.
  ReferenceRows rr;
  std::vector<float> h(rows * flat), pre(rows * hc, 0.0f);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < K; ++j) {
      const int64_t r = i * K + j;
      const int32_t token = j == 0 ? calls[i].anchor : c.dspark_noise_token_id;
      weights_->embed.row(token, &h[r * flat]);
      for (int s = 1; s < hc; ++s) std::copy_n(&h[r * flat], dim, &h[r * flat + s * dim]);
      pre[r * hc] = 1.0f;
      rr.index.push_back(calls[i].reference_index * K + j);
      rr.count.push_back(calls[i].reference_batch * K);
    }
  const int64_t hd = c.head_dim;
  for (int s = 0; s < c.dspark_stages; ++s) {
    // Ring slot j holds the position q <= p with q % window == j.
    std::vector<V41DSparkView> views(n);
    std::vector<std::vector<float>> rings(n);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t p = calls[i].position, filled = std::min(W, p + 1);
      rings[i].resize(filled * hd);
      for (int64_t j = 0; j < filled; ++j) {
        const uint8_t* row = calls[i].cache->window_row(c.dspark_cache_layer(s), p - (p - j) % W);
        kernels::load_v41_window_row(row, hd, &rings[i][j * hd]);
        views[i].ring.push_back(&rings[i][j * hd]);
      }
      views[i].first_pos = p + 1;
    }
    const V41Block& b = d.stages[s];
    const V41LayerContext ctx = layer_context(c.n_layers + s, 0);
    const Attend attend = [&](const float* x, float* y) { v41_dspark_attention(b.attn, ctx, views, K, x, y); };
    const int top_k = c.dspark_n_activated_experts ? c.dspark_n_activated_experts : c.n_activated_experts;
    block(b, attend, top_k, rr, nullptr, &pre, h.data());
  }

  std::vector<float> hidden(rows * dim), normed(rows * dim), logits(rows * V);
  hc_collapse(pre.data(), c, h.data(), rows, hidden.data());
  normed = hidden;
  rms_norm_rows(d.norm, c.norm_eps, normed.data(), rows, dim);
  v41_linear_columns(weights_->head, tensor_group_, normed.data(), rows, logits.data());

  // Left to right: the Markov bias of the previous token, then the draw.
  std::vector<float> conf_in(rows * (dim + R)), conf(rows), bias(V), e(R);
  out->assign(n, DSparkDraft{});
  for (int64_t i = 0; i < n; ++i) {
    const DSparkCall& call = calls[i];
    DSparkDraft& o = (*out)[i];
    o.ids.assign(1, call.anchor);
    o.logits.assign(logits.begin() + i * K * V, logits.begin() + (i + 1) * K * V);
    for (int64_t j = 0; j < K; ++j) {
      const int32_t prev = call.forced_prev ? call.forced_prev[j] : o.ids[j];
      d.markov_embed.row(prev, e.data());
      v41_linear(d.markov_head, e.data(), 1, bias.data());
      float* l = &o.logits[j * V];
      for (int64_t v = 0; v < V; ++v) l[v] += bias[v];
      o.ids.push_back(dspark_draw(l, V, call.temperature, call.noise ? call.noise + j * V : nullptr, call.rng));
      const int64_t r = i * K + j;
      std::copy_n(&hidden[r * dim], dim, &conf_in[r * (dim + R)]);
      std::copy_n(e.data(), R, &conf_in[r * (dim + R) + dim]);
    }
  }
  v41_linear(d.confidence, conf_in.data(), rows, conf.data());
  for (int64_t i = 0; i < n; ++i) {
    DSparkDraft& o = (*out)[i];
    o.confidence.assign(conf.begin() + i * K, conf.begin() + (i + 1) * K);
    if (details) {
      o.main_x = std::move(main_x[i]);
      o.hidden.assign(hidden.begin() + i * K * dim, hidden.begin() + (i + 1) * K * dim);
    }
  }
  return Status::Ok();
}

}  // namespace dsv4
