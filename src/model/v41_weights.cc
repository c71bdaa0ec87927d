#include "model/v41_weights.h"

namespace dsv4 {
namespace {

int64_t floats(const std::vector<float>& v) { return 4 * static_cast<int64_t>(v.size()); }

int64_t block_bytes(const V41Block& b) {
  const V41Attention& a = b.attn;
  int64_t n = floats(a.attn_sink) + floats(a.q_norm) + floats(a.kv_norm) + floats(b.attn_norm) + floats(b.ffn_norm);
  for (const V41Linear* l : {&a.wq_a, &a.wq_b, &a.wkv, &a.wo_a, &a.wo_b}) n += l->bytes();
  if (a.compressor) n += a.compressor->wkv.bytes() + a.compressor->wgate.bytes() + floats(a.compressor->norm);
  if (a.indexer) {
    const V41Indexer& ix = *a.indexer;
    n += ix.wq_b.bytes() + ix.weights_proj.bytes() + ix.wk.bytes() + floats(ix.k_norm);
  }
  n += b.ffn.gate.bytes() + floats(b.ffn.gate_bias);
  for (const V41Expert& e : b.ffn.experts) n += e.w1.bytes() + e.w2.bytes() + e.w3.bytes();
  n += b.ffn.shared.w1.bytes() + b.ffn.shared.w2.bytes() + b.ffn.shared.w3.bytes();
  for (const HyperConnWeights* hc : {&b.hc_attn, &b.hc_ffn}) n += hc->fn.resident_bytes() + floats(hc->base) + floats(hc->scale);
  if (b.engram) n += b.engram->wkv.bytes() + floats(b.engram->qk);
  return n;
}

// Every product linear of a block, const or not.
template <class Block, class Fn>
void for_each_block_product(Block& b, Fn&& f) {
  auto& a = b.attn;
  for (auto* l : {&a.wq_a, &a.wq_b, &a.wkv, &a.wo_a, &a.wo_b}) f(*l);
  if (a.compressor) {
    f(a.compressor->wkv);
    f(a.compressor->wgate);
  }
  if (a.indexer) {
    f(a.indexer->wq_b);
    f(a.indexer->weights_proj);
    f(a.indexer->wk);
  }
  f(b.ffn.gate);
  for (auto& e : b.ffn.experts)
    for (auto* l : {&e.w1, &e.w2, &e.w3}) f(*l);
  for (auto* l : {&b.ffn.shared.w1, &b.ffn.shared.w2, &b.ffn.shared.w3}) f(*l);
  if (b.engram) f(b.engram->wkv);
}

template <class Weights, class Fn>
void for_each_weights_product(Weights& w, Fn&& f) {
  f(w.head);
  for (auto& b : w.blocks) for_each_block_product(b, f);
  if (!w.dspark) return;
  for (auto* l : {&w.dspark->main_proj, &w.dspark->markov_head, &w.dspark->confidence}) f(*l);
  for (auto& b : w.dspark->stages) for_each_block_product(b, f);
}

}  // namespace

void V41Weights::for_each_product(const std::function<void(V41Linear&)>& f) { for_each_weights_product(*this, f); }

void V41Weights::for_each_product(const std::function<void(const V41Linear&)>& f) const {
  for_each_weights_product(*this, f);
}

void V41Weights::for_each_buffer(const std::function<void(const void*, size_t)>& fn) const {
  auto vec = [&](const std::vector<float>& v) {
    if (!v.empty()) fn(v.data(), sizeof(float) * v.size());
  };
  auto block = [&](const V41Block& b) {
    const V41Attention& a = b.attn;
    for (const std::vector<float>* v : {&a.attn_sink, &a.q_norm, &a.kv_norm, &b.attn_norm, &b.ffn_norm, &b.ffn.gate_bias})
      vec(*v);
    if (a.compressor) vec(a.compressor->norm);
    if (a.indexer) vec(a.indexer->k_norm);
    for (const HyperConnWeights* h : {&b.hc_attn, &b.hc_ffn}) {
      h->fn.for_each_buffer(fn);
      vec(h->base);
      vec(h->scale);
    }
    if (b.engram) vec(b.engram->qk);
  };
  for_each_product([&](const V41Linear& l) { l.for_each_buffer(fn); });
  embed.for_each_buffer(fn);
  vec(norm);
  for (const V41Block& b : blocks) block(b);
  if (dspark) {
    dspark->markov_embed.for_each_buffer(fn);
    vec(dspark->main_norm);
    vec(dspark->norm);
    for (const V41Block& b : dspark->stages) block(b);
  }
}

int64_t V41Weights::resident_bytes() const {
  int64_t n = embed.bytes() + floats(norm) + head.bytes();
  for (const V41Block& b : blocks) n += block_bytes(b);
  if (dspark) {
    const V41DSpark& d = *dspark;
    n += d.main_proj.bytes() + floats(d.main_norm) + floats(d.norm) + d.markov_embed.bytes() + d.markov_head.bytes() +
         d.confidence.bytes();
    for (const V41Block& b : d.stages) n += block_bytes(b);
  }
  return n;
}

int64_t V41Weights::engram_bytes() const {
  int64_t n = 0;
  for (const V41Block& b : blocks)
    if (b.engram) n += b.engram->rows * (b.engram->head_dim + b.engram->head_dim / V41Linear::kBlock);
  return n;
}

}  // namespace dsv4
