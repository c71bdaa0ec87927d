// The DSpark drafter's forward (model/dspark.h), members of DeepseekV4.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/phase_timer.h"
#include "kernels/cache_rows.h"
#include "kernels/kernels.h"
#include "model/attention.h"
#include "model/deepseek_v4.h"
#include "model/hyper_connection.h"

namespace dsv4 {
namespace {

void rms_norm_each(const std::vector<float>& weight, float eps, float* x, int64_t rows, int64_t dim) {
  for (int64_t r = 0; r < rows; ++r) kernels::rms_norm(x + r * dim, weight.data(), dim, eps, x + r * dim);
}

}  // namespace

int32_t dspark_draw(const float* logits, int64_t vocab, float temperature, const float* noise, std::mt19937_64* rng) {
  if (temperature == 0.0f) return static_cast<int32_t>(std::max_element(logits, logits + vocab) - logits);
  const float t = std::max(temperature, 1e-5f);
  std::vector<float> p(vocab);
  float mx = -INFINITY;
  for (int64_t v = 0; v < vocab; ++v) mx = std::max(mx, p[v] = logits[v] / t);
  float sum = 0.0f;
  for (int64_t v = 0; v < vocab; ++v) sum += p[v] = std::exp(p[v] - mx);
  int32_t best = 0;
  float best_score = -1.0f;
  std::exponential_distribution<float> exp1(1.0f);
  for (int64_t v = 0; v < vocab; ++v) {
    const float e = noise ? noise[v] : exp1(*rng);
    const float score = p[v] / sum / e;
    if (score > best_score) best_score = score, best = static_cast<int32_t>(v);
  }
  return best;
}

void dspark_tap_rows(const float* streams, int64_t rows, int hc, int64_t dim, int tap, int num_taps, float* taps) {
  for (int64_t r = 0; r < rows; ++r) {
    float* o = taps + (r * num_taps + tap) * dim;
    const float* s = streams + r * hc * dim;
    for (int64_t d = 0; d < dim; ++d) {  // h.mean(dim=2): the copies summed in order, then divided
      float sum = s[d];
      for (int c = 1; c < hc; ++c) sum += s[c * dim + d];
      o[d] = sum / static_cast<float>(hc);
    }
  }
}

Status DeepseekV4::dspark_fill(SequenceCache* cache, const float* taps, int64_t rows, int64_t pos0, bool every_row,
                               std::vector<float>* main_x_out) const {
  if (!weights_->dspark) return invalid_argument("the model has no DSpark drafter");
  const ModelConfig& c = config_;
  const DSparkWeights& d = *weights_->dspark;
  const kernels::Kernels& k = kernels::kernels_for(options_.numerics);
  ForwardScope scope;
  scope.split = TokenSplit::of(rows, tensor_group_);
  ForwardScope::Guard guard(scope);
  std::vector<float> main_x(rows * c.dim);
  linear_forward(k, d.main_proj, taps, rows, main_x.data());
  rms_norm_each(d.main_norm, c.norm_eps, main_x.data(), rows, c.dim);
  // A ring holds the last window of positions; earlier rows would be
  // overwritten before any call reads them.
  const int64_t from = every_row ? 0 : std::max<int64_t>(0, rows - c.window_size);
  const int64_t row_bytes = kernels::KvRowFormat{c.head_dim - c.rope_head_dim, c.rope_head_dim}.bytes();
  std::vector<int64_t> pos(rows - from);
  for (int64_t i = from; i < rows; ++i) pos[i - from] = pos0 + i;
  std::vector<uint8_t> kv((rows - from) * row_bytes);
  for (int s = 0; s < c.dspark_stages; ++s) {
    const int layer = c.dspark_cache_layer(s);
    const LayerContext ctx{k, c, rope_for(0), layer, tensor_group_};
    attention_kv_rows(d.stages[s].attn, ctx, main_x.data() + from * c.dim, rows - from, pos, kv.data());
    for (int64_t i = from; i < rows; ++i)
      std::memcpy(cache->window_row(layer, pos0 + i), &kv[(i - from) * row_bytes], row_bytes);
  }
  if (main_x_out) *main_x_out = std::move(main_x);
  return Status::Ok();
}

Status DeepseekV4::dspark_draft(const std::vector<DSparkCall>& calls, std::vector<DSparkDraft>* out,
                                bool details) const {
  if (!weights_->dspark) return invalid_argument("the model has no DSpark drafter");
  const ModelConfig& c = config_;
  const DSparkWeights& d = *weights_->dspark;
  const int64_t K = c.dspark_block_size, V = c.vocab_size, dim = c.dim, hc = c.hc_mult, R = c.dspark_markov_rank;
  const int64_t n = static_cast<int64_t>(calls.size()), rows = n * K, flat = hc * dim;
  for (const DSparkCall& call : calls)
    if (call.position < 1 || call.position + 1 + K > c.max_position_embeddings)
      return invalid_argument("a DSpark draft call at position " + std::to_string(call.position) +
                              " needs 1 <= position and its block within the model's positions");
  out->assign(n, DSparkDraft{});

  // Each call's tap row into its rings at its position (the reference
  // writes the slot before the block attends it).
  for (int64_t i = 0; i < n; ++i) {
    std::vector<float> main_x;
    DSV4_RETURN_IF_ERROR(
        dspark_fill(calls[i].cache, calls[i].tap, 1, calls[i].position, false, details ? &main_x : nullptr));
    if (details) (*out)[i].main_x = std::move(main_x);
  }

  const kernels::Kernels& k = kernels::kernels_for(options_.numerics);
  ForwardBatch batch;  // the block's tokens (no sequence caches: the rings are the context)
  ReferenceRows rr;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < K; ++j) {
      batch.token_ids.push_back(j == 0 ? calls[i].anchor : c.dspark_noise_token_id);
      rr.index.push_back(calls[i].reference_index * K + j);
      rr.count.push_back(calls[i].reference_batch * K);
    }
  ForwardScope scope;
  scope.split = TokenSplit::of(rows, tensor_group_);
  ForwardScope::Guard guard(scope);
  std::vector<float> h(rows * flat);
  {
    std::vector<float> e(rows * dim);
    embed(batch, e.data());  // the trunk's embedding (sharded by vocabulary under TP)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t s = 0; s < hc; ++s) std::memcpy(&h[r * flat + s * dim], &e[r * dim], sizeof(float) * dim);
  }
  for (int s = 0; s < c.dspark_stages; ++s) {
    const int layer = c.dspark_cache_layer(s);
    std::vector<DSparkAttendCall> views(n);
    for (int64_t i = 0; i < n; ++i) {
      // Slot j holds the position q <= p with q % window == j.
      const int64_t p = calls[i].position, W = c.window_size;
      for (int64_t j = 0; j < std::min(W, p + 1); ++j)
        views[i].ring.push_back(calls[i].cache->window_row(layer, p - (p - j) % W));
      views[i].first_pos = p + 1;
    }
    const LayerContext ctx{k, c, rope_for(0), layer, tensor_group_};
    const AttendFn attend = [&](const float* x, int64_t, float* o) {
      dspark_attention_forward(d.stages[s].attn, ctx, views, K, x, o);
    };
    block(k, d.stages[s], layer, batch, rr, h.data(), &attend);
    if (details)
      for (int64_t i = 0; i < n; ++i)
        (*out)[i].stage_out.emplace_back(h.begin() + i * K * flat, h.begin() + (i + 1) * K * flat);
  }

  // Head: hc_head (before the norm: the confidence reads it), norm, the
  // trunk's head.
  PhaseTimer::Scope time(Phase::kHead);
  std::vector<float> hidden(rows * dim), normed(rows * dim), base(rows * V);
  std::vector<int64_t> batch_rows(rows);
  for (int64_t r = 0; r < rows; ++r) batch_rows[r] = r;
  hc_head(k, d.hc_head, c, h.data(), rows, batch_rows.data(), rr, hidden.data());
  normed = hidden;
  rms_norm_each(d.norm, c.norm_eps, normed.data(), rows, dim);
  full_logits(k, normed.data(), rows, base.data());

  // Left to right: the Markov bias of the previous token, then the draw.
  std::vector<float> conf_in(rows * (dim + R)), conf(rows), e(R), bias(V);
  for (int64_t i = 0; i < n; ++i) {
    const DSparkCall& call = calls[i];
    DSparkDraft& o = (*out)[i];
    o.ids.assign(1, call.anchor);
    o.logits.assign(base.begin() + i * K * V, base.begin() + (i + 1) * K * V);
    for (int64_t j = 0; j < K; ++j) {
      const int32_t prev = call.forced_prev ? call.forced_prev[j] : o.ids[j];
      std::memcpy(e.data(), &d.markov_w1[static_cast<int64_t>(prev) * R], sizeof(float) * R);
      linear_forward(k, d.markov_w2, e.data(), 1, bias.data());
      float* l = &o.logits[j * V];
      for (int64_t v = 0; v < V; ++v) l[v] += bias[v];
      o.ids.push_back(dspark_draw(l, V, call.temperature, call.noise ? call.noise + j * V : nullptr, call.rng));
      const int64_t r = i * K + j;
      std::memcpy(&conf_in[r * (dim + R)], &hidden[r * dim], sizeof(float) * dim);
      std::memcpy(&conf_in[r * (dim + R) + dim], e.data(), sizeof(float) * R);
    }
  }
  linear_forward(k, d.confidence, conf_in.data(), rows, conf.data());
  for (int64_t i = 0; i < n; ++i) {
    DSparkDraft& o = (*out)[i];
    o.confidence.assign(conf.begin() + i * K, conf.begin() + (i + 1) * K);
    if (details) {
      o.hidden.assign(hidden.begin() + i * K * dim, hidden.begin() + (i + 1) * K * dim);
      o.base_logits.assign(base.begin() + i * K * V, base.begin() + (i + 1) * K * V);
    }
  }
  return Status::Ok();
}

}  // namespace dsv4
