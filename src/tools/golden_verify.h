// The golden protocol of ../shared/golden: prefill the prompts (optionally in
// chunks), feed the reference's decode ids one by one, run MTP block 0 on the
// final streams, and compare every tensor with the reference's.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "kernels/dispatch.h"
#include "model/collectives.h"

namespace dsv4 {

class DeepseekV4;

// What a comparison must show: a bound on each tensor's relative L2 error,
// and how many of the reference's greedy choices the logits must make.
struct GoldenBounds {
  // Tensor name, "layer_out.*" (every block's output) or "default" (any
  // other tensor) -> bound; a tensor none of them names is reported only.
  std::map<std::string, double> tensors;
  bool greedy_identical = false;          // every prefill and teacher-forced decode token the reference's
  bool prefill_greedy_identical = false;  // every prompt's next token the reference's
  double decode_argmax_min = 0.0;         // share of decode steps whose argmax agrees with the reference's
  double dspark_ids_min = 1.0;            // share of DSpark's drafted tokens that are the reference's (V4.1)
  double bound(const std::string& tensor) const;  // < 0: not bounded

  // Exact numerics: every tensor bit-identical, every token the reference's.
  static GoldenBounds exact();
  // A W8A8 checkpoint: the bounds of tests/README.md (every output, and 70%
  // of the decode argmax).
  static GoldenBounds w8a8();
  // Fast numerics: the case's bounds for any correct implementation whose
  // sums differ from the reference's (case.json beside the golden file,
  // bounds.other_correct_implementations; without one, the README's bounds
  // for the FP8 case).
  static StatusOr<GoldenBounds> other_implementations(const std::string& golden_path);
  // The bounds for a model run in `numerics` against `golden_path`.
  // Exact numerics are held to bit identity unless the case declares no
  // exact_numerics bound (a golden not from the official reference).
  static StatusOr<GoldenBounds> for_run(const std::string& golden_path, kernels::Numerics numerics, bool w8a8);
};

struct VerifyOptions {
  std::string golden_path;
  int chunk = 0;              // prefill chunk size; 0 = whole prompt
  std::string dump_path;      // when set, computed tensors are written here
  GoldenBounds bounds = GoldenBounds::exact();
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
  std::string problem;  // set when it could not be compared ("not computed", "missing from the golden")
  bool pass() const { return problem.empty() && (bound < 0 || rel_l2 <= bound); }
};

// A share of choices that must agree with the reference's.
struct RateCheck {
  std::string name;
  int match = 0, total = 0;
  double required = 0.0;
  double rate() const { return total ? static_cast<double>(match) / total : 1.0; }
  bool pass() const { return rate() >= required - 1e-12; }
};

struct VerifyReport {
  // Every output of the protocol and every F32 tensor of the golden, one
  // check each (tensors on one side only are checks that fail).
  std::vector<TensorCheck> tensors;
  int golden_outputs = 0;  // F32 tensors the golden holds
  int compared() const;    // checks with both sides present
  std::vector<RateCheck> rates;
  // The reference's greedy choices the logits made: every token (exact
  // runs), or the prompts' next tokens and the decode steps' argmax.
  int greedy_total = 0;
  int greedy_match = 0;
  double greedy_required = 1.0;  // fraction of them that must match
  int prefill_total = 0;         // prompts whose next token must be the reference's
  int prefill_match = 0;
  bool pass() const;  // false with no tensor compared
  const TensorCheck* find(const std::string& name) const;
  std::string format() const;  // a table for people
};

StatusOr<VerifyReport> verify_golden(const DeepseekV4& model, const VerifyOptions& options);

// ||a - g|| / ||g|| over n values (||a - g|| when g is all zeros), in double.
double relative_l2(const float* a, const float* g, int64_t n);

// True when any linear of the model was stored as FP8/FP4 (or W8A8).
bool model_is_quantized(const DeepseekV4& model);
// True when its linears are W8A8 (GoldenBounds::w8a8).
bool model_is_w8a8(const DeepseekV4& model);

}  // namespace dsv4
