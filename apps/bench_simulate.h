// dsv4 bench --simulate: the real forward on a simulated big CPU server
// (tools/machine_simulation.h): ranks placed on its NUMA nodes as serve
// would place them, each rank's pool as many logical workers as its node
// has cores. Prints per phase the pool jobs, tiles, balance, weight bytes
// by node and a projected tokens/s against the machine's roofline, and
// checks the tokens against an unsimulated run of the same layout.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "dist/topology.h"
#include "kernels/dispatch.h"
#include "tools/machine_simulation.h"

namespace dsv4::app {

struct SimulateOptions {
  std::string model;                  // checkpoint directory ("": the embedded default model)
  SimulatedMachine machine;
  double job_seconds = -1;            // < 0: measured here
  TopologyOptions asked;              // 1 x 1: tensor parallel over the nodes
  kernels::Numerics numerics = kernels::Numerics::kFast;
  int64_t ctx = 256;                  // prompt tokens before the decode steps
  int64_t gen = 4;                    // decode steps measured
  std::vector<int64_t> batches = {1, 16};
  int64_t chunk = 4096;               // the prefill chunk measured (0: none)
  bool compare = true;                // also run unsimulated and compare the tokens
  int64_t trace_step = 0;             // list this measured decode step's jobs and serial spans (0: none)
};

// "cores=128,nodes=2[,bandwidth=400][,link=64][,core-bandwidth=20][,job-us=2.5]"
// (bandwidth: GB/s a node; link: GB/s a node reads from another).
Status parse_simulated_machine(const std::string& spec, SimulateOptions* out);

int bench_simulate(const SimulateOptions& options);

}  // namespace dsv4::app
