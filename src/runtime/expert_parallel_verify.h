// The golden protocol with the routed experts spread over `ep` ranks (threads
// of this process): each rank loads only its experts, the ranks run the
// protocol in lockstep and combine expert outputs through the group.
#pragma once

#include <string>

#include "base/status.h"
#include "model/golden_verify.h"

namespace dsv4 {

struct ExpertParallelVerify {
  VerifyReport report;             // rank 0's
  int64_t expert_bytes_per_rank = 0;  // routed-expert weights each rank holds
  int64_t expert_bytes_total = 0;
};

StatusOr<ExpertParallelVerify> verify_golden_expert_parallel(const std::string& model_dir, const VerifyOptions& options,
                                                             int ep);

}  // namespace dsv4
