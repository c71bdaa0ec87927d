// The peer side of dsv4 bench: llama.cpp timed on the same weights (a GGUF
// from `dsv4 convert --to gguf`) by peer/llamacpp_bench, a small C program
// calling the shipped llama.cpp library, run with the same contexts, batch
// sizes, decode steps and threads as dsv4's own rows.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace dsv4::app {

struct PeerOptions {
  std::string harness;  // the llamacpp_bench binary (peer/setup_llamacpp.sh builds it)
  std::string gguf;     // empty: no peer run
  std::vector<int64_t> contexts, batches;
  int64_t gen = 16;
  int threads = 2;
};

struct PeerRow {
  std::string phase;  // "prefill", "decode", or "load" (seconds: model and context)
  int64_t batch = 0, ctx_from = 0, ctx_to = 0, tokens = 0;
  double seconds = 0;
  double tok_s() const { return seconds > 0 ? tokens / seconds : 0.0; }
};

// Where setup_llamacpp.sh puts the harness: build/peer/ beside build/dsv4.
std::string default_peer_harness();

// Runs the harness; its rows, or an error with what it printed.
StatusOr<std::vector<PeerRow>> run_llamacpp_peer(const PeerOptions& options);

}  // namespace dsv4::app
