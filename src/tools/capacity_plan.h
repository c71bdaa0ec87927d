// The capacity planner behind `dsv4 plan`: from a config.json alone, what a
// deployment holds per rank (weights by format, as the loader packs them),
// what its KV cache holds per token and how many tokens and requests fit in
// the memory left, and the decode roofline for a memory bandwidth. Every
// number is computed by the code the engine sizes itself with (packed
// panel sizes, KvCacheManager::plan), so they agree with what a loaded
// engine reports.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "base/status.h"
#include "dist/topology.h"
#include "kernels/dispatch.h"
#include "kv/kv_cache_manager.h"
#include "model/config.h"

namespace dsv4 {

// How the checkpoint stores its linears: as released (FP8 blocks, FP4
// routed experts, BF16 embedding, head, compressors and indexer weights),
// or all in BF16 (dsv4 mkmodel's default).
enum class PlanWeights { kReleased, kBf16 };

struct PlanOptions {
  TopologyOptions topology;        // tp, dp, ep (0: ep = tp x dp)
  PlanWeights weights = PlanWeights::kReleased;
  int64_t memory_bytes = 0;        // the machine's memory (0: not planned against a memory size)
  int64_t kv_cache_bytes = 0;      // the KV budget of the whole process (0: memory - weights - headroom)
  int64_t max_model_len = 0;       // 0: the model's max_position_embeddings
  double bandwidth = 0;            // memory read bandwidth in bytes/s (0: no roofline)
  KvCacheOptions cache;            // max_num_seqs, batched tokens, prefix caching, block size
  // DeepSeek-V4.1 holds its linears packed for the fast kernels in fast
  // numerics (a [32, 32] tile's scale once per row); V4's are the same in both.
  kernels::Numerics numerics = kernels::Numerics::kExact;
};

// Resident weight bytes of one rank, by how they are held.
enum class HeldAs { kFp8, kFp4, kBf16, kF32, kNum };
const char* held_as_name(HeldAs h);

struct CapacityPlan {
  ModelConfig config;
  Topology topology;
  int64_t max_model_len = 0;
  std::array<int64_t, static_cast<int>(HeldAs::kNum)> rank_weights{};  // rank 0, by format
  int64_t rank_weight_bytes = 0;   // rank 0's total
  int64_t total_weight_bytes = 0;  // every rank's
  int64_t engram_bytes = 0;        // V4.1's Engram tables: one copy per machine, not per rank
  int64_t memory_bytes = 0;        // the machine's, when given
  bool fits = true;                // the weights and headroom leave memory for a KV cache
  int64_t headroom_bytes = 0;      // activations and the runtime, when the KV budget is derived
  int64_t kv_budget_bytes = 0;     // the whole process's
  KvCachePlan kv;                  // of one rank (each rank of a DP group holds the same pages)
  double kv_bytes_per_token = 0;   // a request of max_model_len tokens
  double kv_bytes_per_token_4k = 0;
  int64_t tokens_per_group = 0;    // compressed history one DP group holds
  int64_t requests_per_group = 0;  // of max_model_len at once
  double decode_bytes_per_token = 0;  // weights a batch-1 decode token reads
  double bandwidth = 0;

  std::string report() const;
};

StatusOr<CapacityPlan> plan_capacity(const ModelConfig& config, const PlanOptions& options);

// Parses "512G", "384GiB", "1.5T", "512M" or a plain byte count; K, M, G
// and T are powers of 1024 (memory sizes), or with `decimal` powers of 1000
// unless written Ki, Mi, Gi, Ti (bandwidths: "400G" is 400 GB/s).
StatusOr<int64_t> parse_byte_size(const std::string& text, bool decimal = false);

}  // namespace dsv4
