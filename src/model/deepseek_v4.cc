#include "model/deepseek_v4.h"

#include <algorithm>
#include <cstring>

#include "base/thread_pool.h"
#include "kernels/kernels.h"
#include "model/attention.h"
#include "model/checkpoint.h"
#include "model/hyper_connection.h"
#include "model/moe.h"

namespace dsv4 {
namespace {

RopeOptions window_rope_options(const ModelConfig& c) {
  RopeOptions o;
  o.rope_dim = c.rope_head_dim;
  o.base = c.rope_theta;
  return o;  // no YaRN on pure sliding-window layers
}

RopeOptions compress_rope_options(const ModelConfig& c) {
  RopeOptions o;
  o.rope_dim = c.rope_head_dim;
  o.base = c.compress_rope_theta;
  o.original_seq_len = c.original_seq_len;
  o.factor = c.rope_factor;
  o.beta_fast = c.beta_fast;
  o.beta_slow = c.beta_slow;
  return o;
}

void rms_norm_rows(const std::vector<float>& weight, float eps, float* x, int64_t rows, int64_t dim) {
  parallel_for(rows, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) kernels::rms_norm(x + r * dim, weight.data(), dim, eps, x + r * dim);
  });
}

}  // namespace

StatusOr<std::unique_ptr<DeepseekV4>> DeepseekV4::load(const std::string& dir, const ModelOptions& options) {
  DSV4_ASSIGN_OR_RETURN(ModelConfig config, ModelConfig::load(dir + "/config.json"));
  DSV4_ASSIGN_OR_RETURN(auto ckpt, Checkpoint::open(dir));
  DSV4_ASSIGN_OR_RETURN(auto weights, ModelWeights::load(config, *ckpt, options.on_progress, options.experts, options.heads));
  return std::make_unique<DeepseekV4>(std::move(config), std::move(weights), options);
}

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

void DeepseekV4::embed(const ForwardBatch& batch, float* out) const {
  const int64_t dim = config_.dim, rows = batch.num_rows();
  const int64_t part = static_cast<int64_t>(weights_->embed.size()) / dim;  // this rank's vocabulary
  const int64_t first = tensor_group_ ? tensor_group_->rank() * part : 0;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = static_cast<int64_t>(batch.token_ids[r]) - first;
    if (t >= 0 && t < part) std::memcpy(out + r * dim, &weights_->embed[t * dim], sizeof(float) * dim);
    else std::fill_n(out + r * dim, dim, 0.0f);
  }
  // Sharded by vocabulary: one rank has each row, the others add zeros.
  if (tensor_group_ && tensor_group_->size() > 1) tensor_group_->all_reduce_sum(out, rows * dim);
}

// One block as the paper draws it: hc_pre -> norm -> attention -> hc_post,
// then hc_pre -> norm -> MoE -> hc_post.
void DeepseekV4::block(const BlockWeights& b, int cache_layer, const ForwardBatch& batch, const ReferenceRows& rr,
                       float* h) const {
  const ModelConfig& c = config_;
  const int64_t rows = batch.num_rows(), dim = c.dim;
  std::vector<float> x(rows * dim), y(rows * dim);

  HcMix mix = hc_pre(b.hc_attn, c, h, rows, rr, x.data());
  rms_norm_rows(b.attn_norm, c.norm_eps, x.data(), rows, dim);
  const LayerContext ctx{c, rope_for(b.attn.ratio), cache_layer, options_.qat_rounding, tensor_group_};
  attention_forward(b.attn, ctx, batch.chunks, x.data(), rows, y.data());
  hc_post(mix, c, y.data(), rows, h);

  mix = hc_pre(b.hc_ffn, c, h, rows, rr, x.data());
  rms_norm_rows(b.ffn_norm, c.norm_eps, x.data(), rows, dim);
  moe_forward(b.ffn, c, x.data(), batch.token_ids.data(), rows, rr, expert_group_, y.data());
  hc_post(mix, c, y.data(), rows, h);
}

void DeepseekV4::head(const HcHeadWeights& hc, const std::vector<float>& norm, const ForwardBatch& batch,
                      const ReferenceRows& rr, const float* h, ForwardOutput* out) const {
  const ModelConfig& c = config_;
  const int64_t flat = static_cast<int64_t>(c.hc_mult) * c.dim, n = batch.chunks.size();
  // Only each chunk's last row needs logits.
  std::vector<float> last(n * flat), x(n * c.dim);
  std::vector<int64_t> last_row(n);
  for (int64_t i = 0; i < n; ++i) {
    const SeqChunk& ch = batch.chunks[i];
    last_row[i] = ch.row_begin + ch.num_tokens - 1;
    std::memcpy(&last[i * flat], h + last_row[i] * flat, sizeof(float) * flat);
  }
  hc_head(hc, c, last.data(), n, last_row.data(), rr, x.data());
  rms_norm_rows(norm, c.norm_eps, x.data(), n, c.dim);
  out->logits.resize(n * c.vocab_size);
  const int64_t part = static_cast<int64_t>(weights_->head.size()) / c.dim;  // this rank's vocabulary
  if (part == c.vocab_size) {
    matmul(x.data(), n, c.dim, weights_->head.data(), c.vocab_size, out->logits.data());
    return;
  }
  // Sharded by vocabulary: each rank's columns, gathered into whole rows.
  std::vector<float> mine(n * part), all(n * c.vocab_size);
  matmul(x.data(), n, c.dim, weights_->head.data(), part, mine.data());
  tensor_group_->all_gather(mine.data(), sizeof(float) * mine.size(), all.data());
  const int ranks = tensor_group_->size();
  for (int r = 0; r < ranks; ++r)
    for (int64_t i = 0; i < n; ++i)
      std::copy_n(&all[(r * n + i) * part], part, &out->logits[i * c.vocab_size + r * part]);
}

Status DeepseekV4::forward(const ForwardBatch& batch, ForwardOutput* out, bool want_hidden) const {
  DSV4_RETURN_IF_ERROR(check_batch(batch));
  const ModelConfig& c = config_;
  const int64_t rows = batch.num_rows(), dim = c.dim, flat = static_cast<int64_t>(c.hc_mult) * dim;
  std::vector<float> e(rows * dim), h(rows * flat);
  embed(batch, e.data());
  const ReferenceRows rr = ReferenceRows::of(batch);
  for (int64_t r = 0; r < rows; ++r)
    for (int s = 0; s < c.hc_mult; ++s) std::memcpy(&h[r * flat + s * dim], &e[r * dim], sizeof(float) * dim);

  for (int i = 0; i < c.n_layers; ++i) {
    block(weights_->blocks[i], i, batch, rr, h.data());
    if (batch.trace) batch.trace->record("layer_out." + std::to_string(i), h.data(), rows, flat);
  }
  if (batch.trace) batch.trace->record("final_hidden", h.data(), rows, flat);
  head(weights_->hc_head, weights_->norm, batch, rr, h.data(), out);
  if (want_hidden) out->hidden = std::move(h);
  for (const SeqChunk& ch : batch.chunks) ch.cache->length += ch.num_tokens;
  return Status::Ok();
}

Status DeepseekV4::forward_mtp(int mtp_index, const ForwardBatch& batch, const float* hidden,
                               ForwardOutput* out) const {
  if (mtp_index < 0 || mtp_index >= static_cast<int>(weights_->mtp.size())) return invalid_argument("the model has no MTP block " + std::to_string(mtp_index));
  DSV4_RETURN_IF_ERROR(check_batch(batch));
  const ModelConfig& c = config_;
  const MtpWeights& m = weights_->mtp[mtp_index];
  const int64_t rows = batch.num_rows(), dim = c.dim, hc = c.hc_mult;
  // Combine the embedding of the next token with the main model's streams:
  // e_proj(enorm(embed)) broadcast over the streams + h_proj(hnorm(h)).
  std::vector<float> e(rows * dim), ep(rows * dim), hn(hidden, hidden + rows * hc * dim), h(rows * hc * dim);
  embed(batch, e.data());
  rms_norm_rows(m.enorm, c.norm_eps, e.data(), rows, dim);
  linear_forward(m.e_proj, e.data(), rows, ep.data());
  rms_norm_rows(m.hnorm, c.norm_eps, hn.data(), rows * hc, dim);
  linear_forward(m.h_proj, hn.data(), rows * hc, h.data());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t s = 0; s < hc; ++s)
      for (int64_t d = 0; d < dim; ++d) h[(r * hc + s) * dim + d] += ep[r * dim + d];
  const ReferenceRows rr = ReferenceRows::of(batch);
  block(m.block, c.n_layers + mtp_index, batch, rr, h.data());
  head(m.hc_head, m.norm, batch, rr, h.data(), out);
  for (const SeqChunk& ch : batch.chunks) ch.cache->length += ch.num_tokens;
  return Status::Ok();
}

}  // namespace dsv4
