#include "model/config.h"

#include <sstream>

namespace dsv4 {

std::string ModelConfig::summary() const {
  std::ostringstream s;
  s << n_layers << " layers (+" << n_mtp_layers << " MTP), hidden " << dim << ", " << n_heads << " heads x " << head_dim
    << ", " << n_routed_experts << " experts top-" << n_activated_experts << ", vocab " << vocab_size << ", window "
    << window_size << ", ratios [";
  for (size_t i = 0; i < compress_ratios.size(); ++i) s << (i ? "," : "") << compress_ratios[i];
  s << "]";
  if (family == ModelFamily::kV41) {
    auto list = [&](const std::vector<int>& v) {
      s << "[";
      for (size_t i = 0; i < v.size(); ++i) s << (i ? "," : "") << v[i];
      s << "]";
    };
    s << ", KV sources ";
    list(shared.kv_source_layers);
    s << ", index sources ";
    list(shared.index_source_layers);
    if (shared.candidate_source_layer >= 0)
      s << ", candidates from layer " << shared.candidate_source_layer << " (" << shared.candidate_topk_blocks
        << " blocks of " << shared.candidate_block_size << ")";
    if (engram.enabled()) {
      s << ", Engram before layers ";
      list(engram.layer_ids);
    }
  }
  if (has_dspark()) {
    s << ", DSpark drafter: " << dspark_stages << " stages, block " << dspark_block_size << ", taps [";
    for (size_t i = 0; i < dspark_target_layer_ids.size(); ++i) s << (i ? "," : "") << dspark_target_layer_ids[i];
    s << "]";
  }
  return s.str();
}

std::string ModelConfig::dspark_drafter_problem() const {
  // forward_embed: [anchor, noise x (block - 1)] embedded by the trunk.
  if (dspark_noise_token_id < 0 || dspark_noise_token_id >= vocab_size)
    return "dspark_noise_token_id " + std::to_string(dspark_noise_token_id) + " is not a token id";
  if (dspark_markov_rank <= 0) return "dspark_markov_rank must be positive";
  // main_proj reads the taps concatenated in layer order.
  if (dspark_target_layer_ids.empty()) return "dspark_target_layer_ids must name the target layers the drafter reads";
  for (size_t i = 0; i < dspark_target_layer_ids.size(); ++i) {
    const int l = dspark_target_layer_ids[i];
    if (l < 0 || l >= n_layers || (i && l <= dspark_target_layer_ids[i - 1]))
      return "dspark_target_layer_ids must be ascending layers below the " + std::to_string(n_layers) + " layers";
  }
  return "";
}

}  // namespace dsv4
