// The golden protocol over a TP x DP x EP topology: each rank loads only its
// share of the weights, each data-parallel group runs its share of the
// prompts, and the groups' rows are merged before the comparison. Ranks are
// threads of this process (verify_golden_parallel) or MPI processes
// (verify_golden_on_rank on every process).
#pragma once

#include <string>

#include "base/status.h"
#include "dist/communicator.h"
#include "dist/topology.h"
#include "model/forward_scope.h"
#include "tools/dspark_verify.h"
#include "tools/golden_verify.h"
#include "tools/v41_golden_verify.h"

namespace dsv4 {

struct ParallelVerifyOptions {
  TopologyOptions topology;
  FlashCommOptions flashcomm;
  kernels::Numerics numerics = kernels::Numerics::kExact;
};

struct RankVerify {
  Topology topology;
  VerifyReport report;               // every rank's must agree
  int64_t weight_bytes = 0;          // resident f32 weights of this rank
  Communicator::Traffic traffic;     // sent by this rank over all its groups
  int64_t flashcomm_forwards = 0;    // forwards that ran with FlashComm1
};

// Collective over `world`: every rank calls it.
StatusOr<RankVerify> verify_golden_on_rank(const std::string& model_dir, const VerifyOptions& options,
                                           const ParallelVerifyOptions& parallel, Communicator& world);

struct ParallelVerify {
  Topology topology;
  VerifyReport report;                // rank 0's (the ranks are checked to agree)
  int64_t weight_bytes_per_rank = 0;  // the most any rank holds
  int64_t weight_bytes_single = 0;    // the same model on one rank
  int64_t flashcomm_forwards = 0;     // over every rank
};

StatusOr<ParallelVerify> verify_golden_parallel(const std::string& model_dir, const VerifyOptions& options,
                                                const ParallelVerifyOptions& parallel);

// A DeepSeek-V4.1 case on tensor-, data- and expert-parallel ranks: each
// rank holds its share (RankShards) and runs the whole protocol with its
// groups (the prompts are not split over the data-parallel groups: every
// group runs them all). On one rank, collective over `world`; over threads,
// rank 0's report, the ranks checked to agree.
StatusOr<RankVerify> verify_v41_golden_on_rank(const std::string& model_dir, const V41VerifyOptions& options,
                                               const ParallelVerifyOptions& parallel, Communicator& world);
StatusOr<ParallelVerify> verify_v41_golden_parallel(const std::string& model_dir, const V41VerifyOptions& options,
                                                    const ParallelVerifyOptions& parallel);

// A DSpark case (one protocol per call) on a TP x EP layout (one
// data-parallel group). Collective over `world`: every rank calls it.
StatusOr<VerifyReport> verify_dspark_on_rank(const std::string& model_dir, const DSparkVerifyOptions& options,
                                             const ParallelVerifyOptions& parallel, Communicator& world);

// The same with ranks as threads: rank 0's report, the ranks checked to
// agree.
StatusOr<VerifyReport> verify_dspark_parallel(const std::string& model_dir, const DSparkVerifyOptions& options,
                                              const ParallelVerifyOptions& parallel);

}  // namespace dsv4
