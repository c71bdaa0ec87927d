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

StatusOr<RankVerify> verify_golden_on_rank(const std::string& dir, const VerifyOptions& options,
                                           const ParallelVerifyOptions& p, Communicator& world) {
  DSV4_ASSIGN_OR_RETURN(ModelConfig config, ModelConfig::load(dir + "/config.json"));
  DSV4_ASSIGN_OR_RETURN(Topology topo, Topology::make(p.topology, config, world.size()));
  RankGroups groups = RankGroups::split(world, topo);
  const int rank = world.rank();
  ModelOptions mo;
  mo.experts = {topo.ep_rank(rank), topo.ep};
  mo.heads = {topo.tp_rank(rank), topo.tp};
  mo.flashcomm = p.flashcomm;
  auto model = DeepseekV4::load(dir, mo);
  // Every rank must get this far before any of them steps into the forward.
  int loaded = model.ok(), all_loaded = 1;
  std::vector<int> flags(world.size());
  world.all_gather(&loaded, sizeof loaded, flags.data());
  for (int f : flags) all_loaded &= f;
  if (!model.ok()) return model.status();
  if (!all_loaded) return internal_error("another rank could not load its share of the model");
  if (topo.tp > 1) (*model)->set_tensor_group(groups.tp.get());
  if (topo.ep > 1) (*model)->set_expert_group(groups.ep.get());
  VerifyOptions o = options;
  o.dp_rank = topo.dp_rank(rank);
  o.dp_size = topo.dp;
  o.merge = groups.peers.get();
  o.quantized = o.quantized || model_is_quantized(**model);
  if (rank != 0) o.dump_path.clear();
  DSV4_ASSIGN_OR_RETURN(VerifyReport report, verify_golden(**model, o));
  RankVerify out;
  out.topology = topo;
  out.report = std::move(report);
  out.weight_bytes = resident_weight_bytes(**model);
  out.flashcomm_forwards = (*model)->flashcomm_forwards();
  const Communicator* comms[] = {&world, groups.tp.get(), groups.ep.get(), groups.peers.get()};
  for (const Communicator* c : comms) {
    out.traffic.bytes += c->traffic().bytes;
    out.traffic.collectives += c->traffic().collectives;
  }
  return out;
}

StatusOr<ParallelVerify> verify_golden_parallel(const std::string& dir, const VerifyOptions& options,
                                                const ParallelVerifyOptions& p) {
  DSV4_ASSIGN_OR_RETURN(ModelConfig config, ModelConfig::load(dir + "/config.json"));
  DSV4_ASSIGN_OR_RETURN(Topology topo, Topology::make(p.topology, config));
  auto comms = LocalCommunicator::create(topo.world);
  std::vector<StatusOr<RankVerify>> runs(topo.world, Status(StatusCode::kInternal, "not run"));
  std::vector<std::thread> threads;
  for (int r = 0; r < topo.world; ++r)
    threads.emplace_back([&, r] { runs[r] = verify_golden_on_rank(dir, options, p, *comms[r]); });
  for (auto& t : threads) t.join();
  for (int r = 0; r < topo.world; ++r) DSV4_RETURN_IF_ERROR(runs[r].status());
  ParallelVerify out;
  out.topology = topo;
  out.report = runs[0]->report;
  for (int r = 0; r < topo.world; ++r) {
    for (size_t i = 0; i < out.report.tensors.size(); ++i)
      if (runs[r]->report.tensors[i].rel_l2 != out.report.tensors[i].rel_l2)
        return internal_error("ranks disagree on " + out.report.tensors[i].name);
    out.weight_bytes_per_rank = std::max(out.weight_bytes_per_rank, runs[r]->weight_bytes);
    out.flashcomm_forwards += runs[r]->flashcomm_forwards;
  }
  DSV4_ASSIGN_OR_RETURN(auto single, DeepseekV4::load(dir));
  out.weight_bytes_single = resident_weight_bytes(*single);
  return out;
}

}  // namespace dsv4
