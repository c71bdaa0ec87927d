#include "runtime/rank_model.h"

#include "checkpoint/model_loader.h"
#include "checkpoint/v41_loader.h"

namespace dsv4 {

StatusOr<RankModel> load_rank_model(const std::string& dir, const ModelConfig& config, ModelOptions options,
                                    const FlashCommOptions& flashcomm, const Topology& t, int rank,
                                    const RankGroups& groups) {
  const ExpertShard experts{t.ep_rank(rank), t.ep};
  RankModel out;
  if (config.family == ModelFamily::kV41) {
    const RankShards shards{experts, {t.tp_rank(rank), t.tp}};
    DSV4_ASSIGN_OR_RETURN(std::unique_ptr<DeepseekV41> model,
                          load_deepseek_v41(dir, options.on_progress, shards, options.numerics));
    if (t.tp > 1) model->set_tensor_group(groups.tp.get(), flashcomm);
    if (t.ep > 1) model->set_expert_group(groups.ep.get());
    out.v41 = model.get();
    out.model = std::move(model);
    return out;
  }
  options.experts = experts;
  options.heads = {t.tp_rank(rank), t.tp};
  options.flashcomm = flashcomm;
  DSV4_ASSIGN_OR_RETURN(std::unique_ptr<DeepseekV4> model, load_deepseek_v4(dir, options));
  if (t.tp > 1) model->set_tensor_group(groups.tp.get());
  if (t.ep > 1) model->set_expert_group(groups.ep.get());
  out.v4 = model.get();
  out.model = std::move(model);
  return out;
}

Status bind_rank_weights(const RankModel& m, MemoryBinding& binding, int node) {
  Status status = Status::Ok();
  auto bind = [&](const void* at, size_t bytes) {
    if (status.ok() && bytes) status = binding.bind(at, bytes, node);
  };
  if (m.v41) m.v41->weights().for_each_buffer(bind);
  else m.v4->weights().for_each_buffer(bind);
  return status;
}

}  // namespace dsv4
