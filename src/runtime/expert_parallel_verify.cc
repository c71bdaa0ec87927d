#include "runtime/expert_parallel_verify.h"

#include <thread>

#include "dist/local_communicator.h"
#include "model/deepseek_v4.h"

namespace dsv4 {
namespace {

int64_t expert_bytes(const DeepseekV4& m) {
  int64_t n = 0;
  auto add = [&](const MoEWeights& moe) {
    for (const ExpertWeights& e : moe.experts) n += 4 * (e.w1.w.size() + e.w2.w.size() + e.w3.w.size());
  };
  for (const BlockWeights& b : m.weights().blocks) add(b.ffn);
  for (const MtpWeights& t : m.weights().mtp) add(t.block.ffn);
  return n;
}

}  // namespace

StatusOr<ExpertParallelVerify> verify_golden_expert_parallel(const std::string& dir, const VerifyOptions& options,
                                                             int ep) {
  if (ep < 1) return invalid_argument("--ep must be at least 1");
  DSV4_ASSIGN_OR_RETURN(ModelConfig config, ModelConfig::load(dir + "/config.json"));
  if (config.n_routed_experts % ep != 0)
    return invalid_argument("--ep " + std::to_string(ep) + " must divide the " + std::to_string(config.n_routed_experts) +
                            " routed experts");
  std::vector<std::unique_ptr<DeepseekV4>> models;
  for (int r = 0; r < ep; ++r) {
    ModelOptions mo;
    mo.experts = {r, ep};
    DSV4_ASSIGN_OR_RETURN(auto m, DeepseekV4::load(dir, mo));
    models.push_back(std::move(m));
  }
  auto comms = LocalCommunicator::create(ep);
  std::vector<StatusOr<VerifyReport>> reports(ep, Status(StatusCode::kInternal, "not run"));
  std::vector<std::thread> ranks;
  for (int r = 0; r < ep; ++r) {
    models[r]->set_expert_group(comms[r].get());
    ranks.emplace_back([&, r] {
      VerifyOptions o = options;
      if (r) o.dump_path.clear();
      reports[r] = verify_golden(*models[r], o);
    });
  }
  for (auto& t : ranks) t.join();
  for (int r = 0; r < ep; ++r) DSV4_RETURN_IF_ERROR(reports[r].status());
  // Every rank computed the same numbers.
  for (int r = 1; r < ep; ++r)
    for (size_t i = 0; i < reports[0]->tensors.size(); ++i)
      if (reports[r]->tensors[i].rel_l2 != reports[0]->tensors[i].rel_l2)
        return internal_error("expert-parallel ranks disagree on " + reports[0]->tensors[i].name);
  ExpertParallelVerify out;
  out.report = *reports[0];
  out.expert_bytes_per_rank = expert_bytes(*models[0]);
  for (const auto& m : models) out.expert_bytes_total += expert_bytes(*m);
  return out;
}

}  // namespace dsv4
