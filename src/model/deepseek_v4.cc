#include "model/deepseek_v4.h"

#include "base/phase_timer.h"

#include <algorithm>
#include <cstring>

#include "base/scratch.h"
#include "base/thread_pool.h"
#include "kernels/kernels.h"
#include "model/attention.h"
#include "model/forward_scope.h"
#include "model/hyper_connection.h"
#include "model/moe.h"
#include "ops/norm.h"

namespace dsv4 {

DeepseekV4::DeepseekV4(ModelConfig config, std::unique_ptr<ModelWeights> weights, const ModelOptions& options)
    : config_(std::move(config)),
      options_(options),
      weights_(std::move(weights)),
      window_rope_(window_rope_options(config_)),
      compress_rope_(compress_rope_options(config_)) {}

ContiguousCache DeepseekV4::new_sequence() const {
  return ContiguousCache(CacheGeometry::of(config_), 0, config_.n_layers);
}

ContiguousCache DeepseekV4::new_mtp_sequence(int mtp_index) const {
  return ContiguousCache(CacheGeometry::of(config_), config_.n_layers + mtp_index, 1);
}

Status DeepseekV4::check_batch(const ForwardBatch& batch) const {
  int64_t expect_row = 0;
  for (const SeqChunk& ch : batch.chunks) {
    if (!ch.cache || ch.num_tokens <= 0 || ch.row_begin != expect_row || ch.start_pos != ch.cache->length)
      return invalid_argument("forward batch: chunk rows or positions are inconsistent");
    expect_row += ch.num_tokens;
  }
  if (expect_row != batch.num_rows()) return invalid_argument("forward batch: token count does not match its chunks");
  for (int32_t t : batch.token_ids) {
    if (t < 0 || t >= config_.vocab_size)
      return invalid_argument("token id " + std::to_string(t) + " is outside the vocabulary [0, " +
                              std::to_string(config_.vocab_size) + ")");
  }
  return Status::Ok();
}

// The embeddings of the rows this rank holds (all, or its block under
// FlashComm1).
void DeepseekV4::embed(const ForwardBatch& batch, float* out) const {
  PhaseTimer::Scope time(Phase::kHead);
  const ForwardScope& scope = ForwardScope::current();
  const int64_t dim = config_.dim, rows = batch.num_rows();
  const int64_t part = weights_->embed.rows;  // this rank's vocabulary
  const int64_t first = tensor_group_ ? tensor_group_->rank() * part : 0;
  const bool sharded = tensor_group_ && tensor_group_->size() > 1;
  std::vector<float> mine(sharded && scope.flashcomm ? rows * dim : 0);
  float* e = mine.empty() ? out : mine.data();
  // A row a task: each is a row of a table no cache holds, converted to
  // f32 (a decode batch's 16 rows were one task, on the rank's thread).
  parallel_for(rows, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t t = static_cast<int64_t>(batch.token_ids[r]) - first;
      if (t >= 0 && t < part) weights_->embed.row(t, e + r * dim);
      else std::fill_n(e + r * dim, dim, 0.0f);
    }
  });
  // Sharded by vocabulary: one rank has each row, the others add zeros.
  if (!sharded) return;
  if (scope.flashcomm) reduce_scatter_rows(tensor_group_, scope.split, e, dim, out);
  else tensor_group_->all_reduce_sum(out, rows * dim);
}

// The streams of the given batch rows (the head's input), from the rows
// this rank holds: under FlashComm1 each comes from the rank holding it
// (the others add zeros), not a gather of every row.
std::vector<float> DeepseekV4::select_rows(const std::vector<int64_t>& batch_rows, const float* held) const {
  const ForwardScope& scope = ForwardScope::current();
  const int64_t flat = static_cast<int64_t>(config_.hc_mult) * config_.dim, n = batch_rows.size();
  const int64_t first = scope.flashcomm ? scope.split.begin() : 0;
  const int64_t count = scope.flashcomm ? scope.split.count() : INT64_MAX;
  std::vector<float> out(n * flat, 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = batch_rows[i] - first;
    if (row >= 0 && row < count) std::memcpy(&out[i * flat], held + row * flat, sizeof(float) * flat);
  }
  if (scope.flashcomm) tensor_group_->all_reduce_sum(out.data(), n * flat);
  return out;
}

// One block as the paper draws it: hc_pre -> norm -> attention -> hc_post,
// then hc_pre -> norm -> MoE -> hc_post. h holds the rows of the residual
// stream this rank keeps (all, or its block under FlashComm1).
void DeepseekV4::block(const kernels::Kernels& k, const BlockWeights& b, int cache_layer, const ForwardBatch& batch,
                       const ReferenceRows& rr, float* h, const AttendFn* attend, NextBlock* link) const {
  const ModelConfig& c = config_;
  const ForwardScope& scope = ForwardScope::current();
  const TokenSplit& split = scope.split;
  const int64_t rows = batch.num_rows(), dim = c.dim;
  const int64_t held = scope.flashcomm ? split.count() : rows;
  const ReferenceRows held_rr = scope.flashcomm ? rr.slice(split.begin(), held) : rr;
  ScratchVector<float> x(held * dim), y(held * dim), x_all(scope.flashcomm ? rows * dim : 0);
  // Sublayer inputs are every row of the forward: gathered under FlashComm1.
  auto all_rows = [&]() -> const float* {
    if (!scope.flashcomm) return x.data();
    gather_rows(tensor_group_, split, x.data(), dim, x_all.data());
    return x_all.data();
  };
  // Sublayer outputs [rows, width] split by features -> the held rows, whole.
  auto held_rows = [&](const ScratchVector<float>& cols, int64_t width) {
    if (scope.flashcomm) columns_to_rows(tensor_group_, split, cols.data(), width, y.data());
    else gather_columns(tensor_group_, split, cols.data(), width, y.data());
  };

  // At decode the streams live in h_mid between the sublayers, so the
  // attention's hc_post and the MoE's hc_pre run as one job (hc_post_pre);
  // more rows stay in h, updated in place.
  ScratchVector<float> h_mid(held <= kStepInProductRows ? held * c.hc_mult * dim : 0);
  float* mid = h_mid.empty() ? h : h_mid.data();
  HcMix mix;
  {
    PhaseTimer::Scope time(Phase::kHyperConnections);
    if (link && link->ready) {  // the previous block's last job made them
      mix = std::move(link->mix);
      x.swap(link->x);
      link->ready = false;
    } else {
      mix = hc_pre(k, b.hc_attn, b.attn_norm, c, h, held, held_rr, x.data());
    }
  }
  const LayerContext ctx{k, c, rope_for(b.attn.ratio), cache_layer, tensor_group_};
  ScratchVector<float> cols(rows * b.attn.wo_b.out);
  if (attend) (*attend)(all_rows(), rows, cols.data());
  else attention_forward(b.attn, ctx, batch.chunks, all_rows(), rows, cols.data());
  held_rows(cols, b.attn.wo_b.out);
  {
    PhaseTimer::Scope time(Phase::kHyperConnections);
    mix = hc_post_pre(k, mix, y.data(), b.hc_ffn, b.ffn_norm, c, h, held, held_rr, mid, x.data());
  }
  cols.resize(rows * b.ffn.shared.w2.out);
  ScratchVector<float> routed(split.count() * dim), routed_all(scope.flashcomm ? 0 : rows * dim);
  moe_forward(k, b.ffn, c, all_rows(), batch.token_ids.data(), rows, rr, split, {tensor_group_, expert_group_}, cols.data(),
              routed.data());
  held_rows(cols, b.ffn.shared.w2.out);
  const float* r = routed.data();
  if (!scope.flashcomm) {
    gather_rows(tensor_group_, split, routed.data(), dim, routed_all.data());
    r = routed_all.data();
  }
  PhaseTimer::Scope time(Phase::kHyperConnections);
  parallel_for(held, stream_grain(sizeof(float) * dim), [&](int64_t r0, int64_t r1) {
    for (int64_t i = r0 * dim; i < r1 * dim; ++i) y[i] += r[i];
  });
  if (!link || !link->next) return hc_post(mix, c, y.data(), held, mid, h);
  link->x.resize(held * dim);
  link->mix = hc_post_pre(k, mix, y.data(), link->next->hc_attn, link->next->attn_norm, c, mid, held, held_rr, h,
                          link->x.data());
  link->ready = true;
}

void DeepseekV4::head(const kernels::Kernels& k, const HcHeadWeights& hc, const std::vector<float>& norm,
                      const ForwardBatch& batch, const ReferenceRows& rr, const float* held, ForwardOutput* out) const {
  PhaseTimer::Scope time(Phase::kHead);
  const ModelConfig& c = config_;
  // Only the chunks' logit rows go through the head.
  const std::vector<int64_t> rows = batch.logit_row_indices();
  const int64_t n = static_cast<int64_t>(rows.size());
  const std::vector<float> streams = select_rows(rows, held);
  std::vector<float> x(n * c.dim);
  hc_head(k, hc, c, streams.data(), n, rows.data(), rr, x.data());
  rms_norm_rows(norm, c.norm_eps, x.data(), n, c.dim);
  const int64_t part = weights_->head.out;  // this rank's vocabulary
  if (part == c.vocab_size || batch.local_logits) {
    out->logits.resize(n * part);
    out->vocab_begin = part == c.vocab_size ? 0 : tensor_group_->rank() * part;
    out->vocab_size = part;
    linear_forward(k, weights_->head, x.data(), n, out->logits.data());
    return;
  }
  out->logits.resize(n * c.vocab_size);
  out->vocab_begin = 0;
  out->vocab_size = c.vocab_size;
  full_logits(k, x.data(), n, out->logits.data());
}

void DeepseekV4::full_logits(const kernels::Kernels& k, const float* x, int64_t n, float* logits) const {
  const ModelConfig& c = config_;
  const int64_t part = weights_->head.out;
  if (part == c.vocab_size) {
    linear_forward(k, weights_->head, x, n, logits);
    return;
  }
  // Sharded by vocabulary: each rank's columns, gathered into whole rows.
  std::vector<float> mine(n * part), all(n * c.vocab_size);
  linear_forward(k, weights_->head, x, n, mine.data());
  tensor_group_->all_gather(mine.data(), sizeof(float) * mine.size(), all.data());
  const int ranks = tensor_group_->size();
  for (int r = 0; r < ranks; ++r)
    for (int64_t i = 0; i < n; ++i) std::copy_n(&all[(r * n + i) * part], part, &logits[i * c.vocab_size + r * part]);
}

ForwardScope DeepseekV4::scope_for(const ForwardBatch& batch) const {
  ForwardScope scope;
  const int64_t rows = batch.num_rows();
  scope.split = TokenSplit::of(rows, tensor_group_);
  const bool prefill = std::any_of(batch.chunks.begin(), batch.chunks.end(),
                                   [](const SeqChunk& ch) { return ch.start_pos < ch.prefill_len; });
  scope.flashcomm = options_.flashcomm.enabled && scope.split.size > 1 && prefill && rows > 0 &&
                    rows >= options_.flashcomm.min_tokens;
  if (scope.flashcomm) ++flashcomm_forwards_;
  return scope;
}

// Under FlashComm1 each rank holds its block of the streams; the head, the
// trace and MTP want every row.
void DeepseekV4::all_streams(const float* held, float* all, int64_t rows) const {
  const ForwardScope& scope = ForwardScope::current();
  const int64_t flat = static_cast<int64_t>(config_.hc_mult) * config_.dim;
  if (scope.flashcomm) gather_rows(tensor_group_, scope.split, held, flat, all);
  else std::copy_n(held, rows * flat, all);
}

Status DeepseekV4::forward(const ForwardBatch& batch, ForwardOutput* out, bool want_hidden) const {
  DSV4_RETURN_IF_ERROR(check_batch(batch));
  const ModelConfig& c = config_;
  const int64_t rows = batch.num_rows(), dim = c.dim, flat = static_cast<int64_t>(c.hc_mult) * dim;
  const ForwardScope scope = scope_for(batch);
  ForwardScope::Guard guard(scope);
  const kernels::Kernels& k = kernels::kernels_for(options_.numerics);
  const int64_t held = scope.flashcomm ? scope.split.count() : rows;
  const bool taps = batch.want_taps && c.has_dspark();
  ScratchVector<float> e(held * dim), h(held * flat);
  std::vector<float> all(batch.trace || want_hidden || taps ? rows * flat : 0);
  if (taps) out->taps.assign(rows * c.dspark_taps() * dim, 0.0f);
  embed(batch, e.data());
  const ReferenceRows rr = ReferenceRows::of(batch);
  parallel_copy(
      held * c.hc_mult, dim, [&](int64_t i) { return &e[i / c.hc_mult * dim]; }, [&](int64_t i) { return &h[i * dim]; });

  NextBlock link;
  for (int i = 0; i < c.n_layers; ++i) {
    link.next = i + 1 < c.n_layers ? &weights_->blocks[i + 1] : nullptr;
    block(k, weights_->blocks[i], i, batch, rr, h.data(), nullptr, &link);
    const auto tap = std::find(c.dspark_target_layer_ids.begin(), c.dspark_target_layer_ids.end(), i);
    const bool tapped = taps && tap != c.dspark_target_layer_ids.end();
    if (batch.trace || tapped) all_streams(h.data(), all.data(), rows);
    if (batch.trace) batch.trace->record("layer_out." + std::to_string(i), all.data(), rows, flat);
    if (tapped)
      dspark_tap_rows(all.data(), rows, c.hc_mult, dim, static_cast<int>(tap - c.dspark_target_layer_ids.begin()),
                      c.dspark_taps(), out->taps.data());
  }
  if (!all.empty()) all_streams(h.data(), all.data(), rows);
  if (batch.trace) batch.trace->record("final_hidden", all.data(), rows, flat);
  head(k, weights_->hc_head, weights_->norm, batch, rr, h.data(), out);
  if (want_hidden) out->hidden = std::move(all);
  for (const SeqChunk& ch : batch.chunks) ch.cache->length += ch.num_tokens;
  return Status::Ok();
}

Status DeepseekV4::forward_mtp(int mtp_index, const ForwardBatch& batch, const float* hidden, ForwardOutput* out,
                               bool want_hidden) const {
  if (mtp_index < 0 || mtp_index >= static_cast<int>(weights_->mtp.size())) return invalid_argument("the model has no MTP block " + std::to_string(mtp_index));
  DSV4_RETURN_IF_ERROR(check_batch(batch));
  const ModelConfig& c = config_;
  const MtpWeights& m = weights_->mtp[mtp_index];
  const int64_t rows = batch.num_rows(), dim = c.dim, hc = c.hc_mult;
  const ForwardScope scope = scope_for(batch);
  ForwardScope::Guard guard(scope);
  const kernels::Kernels& k = kernels::kernels_for(options_.numerics);
  const int64_t first = scope.flashcomm ? scope.split.begin() : 0, held = scope.flashcomm ? scope.split.count() : rows;
  // Combine the embedding of the next token with the main model's streams:
  // e_proj(enorm(embed)) broadcast over the streams + h_proj(hnorm(h)).
  std::vector<float> e(held * dim), ep(held * dim), hn(hidden + first * hc * dim, hidden + (first + held) * hc * dim),
      h(held * hc * dim);
  embed(batch, e.data());
  rms_norm_rows(m.enorm, c.norm_eps, e.data(), held, dim);
  linear_forward(k, m.e_proj, e.data(), held, ep.data());
  rms_norm_rows(m.hnorm, c.norm_eps, hn.data(), held * hc, dim);
  linear_forward(k, m.h_proj, hn.data(), held * hc, h.data());
  for (int64_t r = 0; r < held; ++r)
    for (int64_t s = 0; s < hc; ++s)
      for (int64_t d = 0; d < dim; ++d) h[(r * hc + s) * dim + d] += ep[r * dim + d];
  const ReferenceRows rr = ReferenceRows::of(batch);
  block(k, m.block, c.n_layers + mtp_index, batch, rr, h.data());
  head(k, m.hc_head, m.norm, batch, rr, h.data(), out);
  if (want_hidden) {
    out->hidden.resize(rows * hc * dim);
    all_streams(h.data(), out->hidden.data(), rows);
  }
  for (const SeqChunk& ch : batch.chunks) ch.cache->length += ch.num_tokens;
  return Status::Ok();
}

}  // namespace dsv4
