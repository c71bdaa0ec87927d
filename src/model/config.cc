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
  if (has_dspark()) {
    s << ", DSpark drafter: " << dspark_stages << " stages, block " << dspark_block_size << ", taps [";
    for (size_t i = 0; i < dspark_target_layer_ids.size(); ++i) s << (i ? "," : "") << dspark_target_layer_ids[i];
    s << "]";
  }
  return s.str();
}

}  // namespace dsv4
