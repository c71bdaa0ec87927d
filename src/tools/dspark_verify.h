// The two protocols of ../shared/golden/DSPARK.md on a DSpark case: the
// drafter fed the golden taps (isolated), and end to end (the target's own
// prefill and teacher-forced decode, its own taps into the drafter). Both
// feed the golden anchors, the golden chain's previous tokens to every
// Markov step and the recorded Exp(1) variates to the temperature-1 draws,
// and compare every tensor of the case with its bound (case.json).
#pragma once

#include <string>

#include "base/status.h"
#include "tools/golden_verify.h"

namespace dsv4 {

class DeepseekV4;

struct DSparkVerifyOptions {
  std::string golden_path;
  bool end_to_end = false;
  int chunk = 0;               // the target's prefill chunk (end to end); 0: whole prompt
  std::string dump_path;       // when set, the computed tensors under the golden names
};

StatusOr<VerifyReport> verify_dspark(const DeepseekV4& model, const DSparkVerifyOptions& options);

// Whether a golden file is a DSpark case (it has draft_ids).
bool is_dspark_golden(const std::string& golden_path);

}  // namespace dsv4
