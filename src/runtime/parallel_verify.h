// The golden protocol over ranks that are threads of this process: the
// attention heads split over `tp` ranks and/or the routed experts over `ep`
// ranks. Each rank loads only its share; the ranks run the protocol in
// lockstep through one group.
#pragma once

#include <string>

#include "base/status.h"
#include "model/golden_verify.h"

namespace dsv4 {

struct ParallelVerifyOptions {
  int tp = 1;  // 1 or the number of ranks
  int ep = 1;  // 1 or the number of ranks
};

struct ParallelVerify {
  int ranks = 1;
  VerifyReport report;               // rank 0's (every rank must agree)
  int64_t weight_bytes_per_rank = 0;  // resident f32 weights of rank 0
  int64_t weight_bytes_single = 0;    // the same model on one rank
};

StatusOr<ParallelVerify> verify_golden_parallel(const std::string& model_dir, const VerifyOptions& options,
                                                const ParallelVerifyOptions& parallel);

// Bytes of f32 weights a loaded model holds.
int64_t resident_weight_bytes(const class DeepseekV4& model);

}  // namespace dsv4
