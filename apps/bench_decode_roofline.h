// dsv4 bench on DeepSeek-V4.1, or on several models at once: decode at
// batch 1 after a prompt, each model against its own memory roofline,
// measured in one run (one bandwidth measurement for all of them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/dispatch.h"

namespace dsv4::app {

struct DecodeRooflineOptions {
  std::vector<std::string> models;          // checkpoint directories ("" : the embedded default model)
  std::vector<kernels::Numerics> numerics;  // for DeepSeek-V4 models (V4.1 runs exact)
  int64_t ctx = 256;                        // prompt tokens before the timed steps
  int64_t gen = 8;                          // decode steps timed
};

int bench_decode_roofline(const DecodeRooflineOptions& options);

}  // namespace dsv4::app
