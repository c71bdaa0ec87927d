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

}  // namespace dsv4
