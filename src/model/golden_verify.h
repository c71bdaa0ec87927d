// The golden protocol of ../shared/golden: prefill the prompts (optionally in
// chunks), feed the reference's decode ids one by one, run MTP block 0 on the
// final streams, and compare every tensor with the reference's.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "model/collectives.h"

namespace dsv4 {

class DeepseekV4;

struct VerifyOptions {
  std::string golden_path;
  int chunk = 0;              // prefill chunk size; 0 = whole prompt
  std::string dump_path;      // when set, computed tensors are written here
  bool quantized = false;     // FP8/FP4 bounds (README) instead of the f32 ones
  // Data parallelism: this rank runs the prompts b with b % dp_size ==
  // dp_rank (possibly none, still stepping with its group), and `merge`
  // (one rank of every data-parallel group, in group order) brings every
  // group's rows together before the comparison.
  int dp_rank = 0;
  int dp_size = 1;
  Collectives* merge = nullptr;
};

struct TensorCheck {
  std::string name;
  double rel_l2 = 0.0;
  double bound = -1.0;  // < 0: reported, not bounded
  bool pass() const { return bound < 0 || rel_l2 <= bound; }
};

struct VerifyReport {
  std::vector<TensorCheck> tensors;
  int greedy_total = 0;
  int greedy_match = 0;
  double greedy_required = 1.0;  // fraction of steps whose argmax must match
  bool pass() const;
  const TensorCheck* find(const std::string& name) const;
  std::string format() const;  // a table for people
};

StatusOr<VerifyReport> verify_golden(const DeepseekV4& model, const VerifyOptions& options);

// True when any linear of the model was stored as FP8/FP4 (or W8A8).
bool model_is_quantized(const DeepseekV4& model);
// True when its linears are W8A8: prefill_logits within 0.3 and the argmax
// of at least 80% of decode steps (other tensors reported, not bounded).
bool model_is_w8a8(const DeepseekV4& model);

}  // namespace dsv4
