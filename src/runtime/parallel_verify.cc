#include "runtime/parallel_verify.h"

#include <algorithm>
#include <thread>

#include "dist/local_communicator.h"
#include "model/deepseek_v4.h"

namespace dsv4 {

int64_t resident_weight_bytes(const DeepseekV4& m) {
  int64_t n = 0;
  auto lin = [&](const Linear& l) { n += 4 * static_cast<int64_t>(l.w.size()); };
  auto vec = [&](const std::vector<float>& v) { n += 4 * static_cast<int64_t>(v.size()); };
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
    lin(a.wo_a);
    lin(a.wo_b);
    if (a.compressor) comp(*a.compressor);
    if (a.indexer) {
      lin(a.indexer->wq_b);
      lin(a.indexer->weights_proj);
      comp(a.indexer->compressor);
    }
    vec(b.ffn.gate);
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
    vec(b.hc_attn.fn);
    vec(b.hc_ffn.fn);
  };
  const ModelWeights& w = m.weights();
  vec(w.embed);
  vec(w.norm);
  vec(w.head);
  vec(w.hc_head.fn);
  for (const BlockWeights& b : w.blocks) block(b);
  for (const MtpWeights& t : w.mtp) {
    block(t.block);
    lin(t.e_proj);
    lin(t.h_proj);
  }
  return n;
}

StatusOr<ParallelVerify> verify_golden_parallel(const std::string& dir, const VerifyOptions& options,
                                                const ParallelVerifyOptions& p) {
  const int ranks = std::max(p.tp, p.ep);
  if (p.tp < 1 || p.ep < 1 || (p.tp != 1 && p.tp != ranks) || (p.ep != 1 && p.ep != ranks))
    return invalid_argument("--tp and --ep must each be 1 or the number of ranks");
  DSV4_ASSIGN_OR_RETURN(ModelConfig config, ModelConfig::load(dir + "/config.json"));
  if (config.n_routed_experts % p.ep != 0)
    return invalid_argument("--ep " + std::to_string(p.ep) + " must divide the " + std::to_string(config.n_routed_experts) +
                            " routed experts");
  std::vector<std::unique_ptr<DeepseekV4>> models;
  for (int r = 0; r < ranks; ++r) {
    ModelOptions mo;
    mo.experts = {p.ep > 1 ? r : 0, p.ep};
    mo.heads = {p.tp > 1 ? r : 0, p.tp};
    DSV4_ASSIGN_OR_RETURN(auto m, DeepseekV4::load(dir, mo));
    models.push_back(std::move(m));
  }
  auto comms = LocalCommunicator::create(ranks);
  std::vector<StatusOr<VerifyReport>> reports(ranks, Status(StatusCode::kInternal, "not run"));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    if (p.ep > 1) models[r]->set_expert_group(comms[r].get());
    if (p.tp > 1) models[r]->set_tensor_group(comms[r].get());
    threads.emplace_back([&, r] {
      VerifyOptions o = options;
      if (r) o.dump_path.clear();
      reports[r] = verify_golden(*models[r], o);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < ranks; ++r) DSV4_RETURN_IF_ERROR(reports[r].status());
  for (int r = 1; r < ranks; ++r)
    for (size_t i = 0; i < reports[0]->tensors.size(); ++i)
      if (reports[r]->tensors[i].rel_l2 != reports[0]->tensors[i].rel_l2)
        return internal_error("ranks disagree on " + reports[0]->tensors[i].name);
  ParallelVerify out;
  out.ranks = ranks;
  out.report = *reports[0];
  out.weight_bytes_per_rank = resident_weight_bytes(*models[0]);
  DSV4_ASSIGN_OR_RETURN(auto single, DeepseekV4::load(dir));
  out.weight_bytes_single = resident_weight_bytes(*single);
  return out;
}

}  // namespace dsv4
