// Where an engine step runs: on one rank, on ranks that are threads of this
// process, or on MPI processes. The engine plans and samples; the executor
// runs the plan's forwards on every rank and brings back what sampling
// needs. It also holds each data-parallel group's cache bookkeeping.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "kv/kv_cache_manager.h"
#include "model/config.h"
#include "runtime/step_plan.h"

namespace dsv4 {

class StepExecutor {
 public:
  virtual ~StepExecutor() = default;
  virtual const ModelConfig& config() const = 0;
  virtual int num_groups() const = 0;  // data-parallel groups: the cache partitions
  virtual KvCacheManager* cache(int group) = 0;
  // One step on every rank: per sampling chunk, in plan order.
  virtual StatusOr<std::vector<SampledLogits>> run(const StepPlan& plan) = 0;
  virtual std::string describe() const = 0;  // the topology, for logs
  // False when a step has been stuck so long that a rank must be gone.
  virtual bool healthy() const { return true; }
  // Reaches every rank without running anything (an idle server finds a
  // lost rank this way, not at its next request).
  virtual Status heartbeat() { return Status::Ok(); }
};

}  // namespace dsv4
