#include "checkpoint/model_loader.h"

#include "checkpoint/checkpoint.h"
#include "checkpoint/config_json.h"
#include "checkpoint/weight_loader.h"

namespace dsv4 {

StatusOr<std::unique_ptr<DeepseekV4>> load_deepseek_v4(const std::string& dir, const ModelOptions& options) {
  DSV4_ASSIGN_OR_RETURN(ModelConfig config, load_model_config(dir + "/config.json"));
  DSV4_ASSIGN_OR_RETURN(auto ckpt, Checkpoint::open(dir));
  WeightLoadOptions load;
  load.progress = options.on_progress;
  load.experts = options.experts;
  load.heads = options.heads;
  DSV4_ASSIGN_OR_RETURN(auto weights, load_weights(config, *ckpt, load));
  return std::make_unique<DeepseekV4>(std::move(config), std::move(weights), options);
}

}  // namespace dsv4
