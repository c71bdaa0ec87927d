// dsv4 bench's default mode: prefill and decode throughput rows.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/dispatch.h"
#include "model/deepseek_v4.h"

namespace dsv4::app {

struct ThroughputOptions {
  std::string name;                         // the model, for the heading
  std::vector<kernels::Numerics> numerics;  // one, or exact and fast side by side
  std::vector<int64_t> contexts, batches;
  int64_t gen = 16;
  std::string csv;                          // empty: no CSV
  std::string peer_gguf, peer_harness;      // llama.cpp on the same weights (empty gguf: none)
  double load_seconds = 0;                  // how long our model took to load
};

int bench_throughput(DeepseekV4& model, const ThroughputOptions& options);

// The weight bytes a batch-1 decode token reads: every main and head
// linear, the routed experts' top-k share.
double decode_bytes_per_token(const DeepseekV4& model);

// This machine's memory read bandwidth, bytes / s: a buffer far larger than
// the caches read on every thread, best of three.
double read_bandwidth();

}  // namespace dsv4::app
