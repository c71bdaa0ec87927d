#include "model/weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "base/dtype.h"
#include "base/thread_pool.h"
#include "kernels/kernels.h"

namespace dsv4 {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

bool reference_rounds_input(const std::string& prefix) {
  // The compressors' wkv / wgate (kept in f32), wo_a (an einsum on the
  // dequantized weight) and the indexer's weights_proj (BF16) take their
  // input as it is.
  for (const char* plain : {".compressor.wkv", ".compressor.wgate", ".wo_a", ".weights_proj"})
    if (ends_with(prefix, plain)) return false;
  return true;
}

namespace {

int64_t linear_bytes(const Linear& l) { return l.resident_bytes(); }

int64_t expert_bytes(const ExpertWeights& e) { return linear_bytes(e.w1) + linear_bytes(e.w2) + linear_bytes(e.w3); }

}  // namespace

void EmbeddingTable::row(int64_t r, float* out) const {
  if (!f32.empty()) {
    std::memcpy(out, &f32[r * dim], sizeof(float) * dim);
    return;
  }
  for (int64_t i = 0; i < dim; ++i) out[i] = bf16_to_f32(bf16[r * dim + i]);
}


namespace {

// Every linear of the model with its kind, for const and mutable weights.
template <class Weights, class Fn>
void visit_linears(Weights& w, Fn&& fn) {
  auto comp = [&](auto& c) {
    fn(c.wkv, LinearKind::kMain);
    fn(c.wgate, LinearKind::kMain);
  };
  auto block = [&](auto& b, LinearKind kind, LinearKind routed) {
    auto& a = b.attn;
    for (auto* l : {&a.wq_a, &a.wq_b, &a.wkv, &a.wo_b}) fn(*l, kind);
    for (auto& g : a.wo_a) fn(g, kind);
    if (a.compressor) comp(*a.compressor);
    if (a.indexer) {
      fn(a.indexer->wq_b, kind);
      fn(a.indexer->weights_proj, kind);
      comp(a.indexer->compressor);
    }
    for (auto& e : b.ffn.experts)
      for (auto* l : {&e.w1, &e.w2, &e.w3}) fn(*l, routed);
    for (auto* l : {&b.ffn.shared.w1, &b.ffn.shared.w2, &b.ffn.shared.w3}) fn(*l, kind);
    for (auto* l : {&b.ffn.gate, &b.hc_attn.fn, &b.hc_ffn.fn}) fn(*l, kind);
  };
  for (auto& b : w.blocks) block(b, LinearKind::kMain, LinearKind::kRoutedExpert);
  for (auto& t : w.mtp) {
    block(t.block, LinearKind::kMtp, LinearKind::kMtp);
    fn(t.e_proj, LinearKind::kMtp);
    fn(t.h_proj, LinearKind::kMtp);
    fn(t.hc_head.fn, LinearKind::kMtp);
  }
  if (w.dspark) {
    for (auto& b : w.dspark->stages) block(b, LinearKind::kMtp, LinearKind::kMtp);
    for (auto* l : {&w.dspark->main_proj, &w.dspark->hc_head.fn, &w.dspark->markov_w2, &w.dspark->confidence})
      fn(*l, LinearKind::kMtp);
  }
  fn(w.hc_head.fn, LinearKind::kMain);
  fn(w.head, LinearKind::kHead);
}

}  // namespace

void ModelWeights::for_each_linear(const std::function<void(const Linear&, LinearKind)>& fn) const {
  visit_linears(*this, fn);
}

void ModelWeights::pack() {
  visit_linears(*this, [](Linear& l, LinearKind) { l.pack(); });
}

int64_t ModelWeights::routed_expert_bytes() const {
  int64_t n = 0;
  for_each_linear([&](const Linear& l, LinearKind kind) {
    if (kind == LinearKind::kRoutedExpert) n += l.resident_bytes();
  });
  for (const MtpWeights& t : mtp)
    for (const ExpertWeights& e : t.block.ffn.experts) n += expert_bytes(e);
  if (dspark)
    for (const BlockWeights& b : dspark->stages)
      for (const ExpertWeights& e : b.ffn.experts) n += expert_bytes(e);
  return n;
}

void ModelWeights::for_each_buffer(const std::function<void(const void*, size_t)>& fn) const {
  auto lin = [&](const Linear& l) { l.for_each_buffer(fn); };
  auto vec = [&](const std::vector<float>& v) { fn(v.data(), sizeof(float) * v.size()); };
  auto comp = [&](const CompressorWeights& c) {
    lin(c.wkv);
    lin(c.wgate);
    vec(c.ape);
    vec(c.norm);
  };
  auto block = [&](const BlockWeights& b) {
    const AttentionWeights& a = b.attn;
    vec(a.attn_sink);
    lin(a.wq_a);
    vec(a.q_norm);
    lin(a.wq_b);
    lin(a.wkv);
    vec(a.kv_norm);
    for (const Linear& g : a.wo_a) lin(g);
    lin(a.wo_b);
    if (a.compressor) comp(*a.compressor);
    if (a.indexer) {
      lin(a.indexer->wq_b);
      lin(a.indexer->weights_proj);
      comp(a.indexer->compressor);
    }
    lin(b.ffn.gate);
    vec(b.ffn.gate_bias);
    for (const ExpertWeights& e : b.ffn.experts) {
      lin(e.w1);
      lin(e.w2);
      lin(e.w3);
    }
    lin(b.ffn.shared.w1);
    lin(b.ffn.shared.w2);
    lin(b.ffn.shared.w3);
    vec(b.attn_norm);
    vec(b.ffn_norm);
    fn(b.ffn.tid2eid.data(), sizeof(b.ffn.tid2eid[0]) * b.ffn.tid2eid.size());
    for (const HyperConnWeights* h : {&b.hc_attn, &b.hc_ffn}) {
      lin(h->fn);
      vec(h->base);
      vec(h->scale);
    }
  };
  auto hc_head = [&](const HcHeadWeights& h) {
    lin(h.fn);
    vec(h.base);
    vec(h.scale);
  };
  const ModelWeights& w = *this;
  fn(w.embed.f32.data(), sizeof(float) * w.embed.f32.size());
  fn(w.embed.bf16.data(), sizeof(uint16_t) * w.embed.bf16.size());
  vec(w.norm);
  lin(w.head);
  hc_head(w.hc_head);
  for (const BlockWeights& b : w.blocks) block(b);
  for (const MtpWeights& t : w.mtp) {
    block(t.block);
    lin(t.e_proj);
    lin(t.h_proj);
    vec(t.enorm);
    vec(t.hnorm);
    vec(t.norm);
    hc_head(t.hc_head);
  }
  if (w.dspark) {
    const DSparkWeights& d = *w.dspark;
    for (const BlockWeights& b : d.stages) block(b);
    lin(d.main_proj);
    vec(d.main_norm);
    vec(d.norm);
    hc_head(d.hc_head);
    vec(d.markov_w1);
    lin(d.markov_w2);
    lin(d.confidence);
  }
}

int64_t ModelWeights::resident_bytes() const {
  int64_t n = 0;
  for_each_buffer([&](const void*, size_t bytes) { n += static_cast<int64_t>(bytes); });
  return n;
}

}  // namespace dsv4
