// Helpers the tests share: where the golden cases are, the golden models
// (loaded once per test binary), and running the dsv4 binary.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/model_loader.h"
#include "model/deepseek_v4.h"
#include "runtime/engine.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/safetensors_writer.h"
#include "sched/sampling_params.h"
#include "tools/synthetic.h"

namespace dsv4::testing {

// Wall-clock bounds are asserted in the README's (unsanitized) run only: a
// sanitized build runs many times slower, on a machine running other tests
// at once, and checks the same code for memory and UB errors instead.
#ifdef DSV4_SANITIZED
inline constexpr bool kTimed = false;
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kTimed = true;
inline constexpr bool kSanitized = false;
#endif

inline std::string golden_dir() {
  const char* env = std::getenv("DSV4_GOLDEN_DIR");
  return env ? env : DSV4_DEFAULT_GOLDEN_DIR;
}

// The model of golden case `name` in `numerics`, loaded on first use.
inline const DeepseekV4& golden_model(const std::string& name,
                                      kernels::Numerics numerics = kernels::Numerics::kExact) {
  static std::map<std::pair<std::string, kernels::Numerics>, std::unique_ptr<DeepseekV4>> cache;
  auto& slot = cache[{name, numerics}];
  if (!slot) {
    ModelOptions options;
    options.numerics = numerics;
    auto m = load_deepseek_v4(golden_dir() + "/" + name, options);
    if (!m.ok()) {
      ADD_FAILURE() << m.status().message();
      std::abort();
    }
    slot = std::move(*m);
  }
  return *slot;
}

// How many F32 tensors golden case `name` holds: in the golden protocol,
// its outputs, each of which a verify run must compare (counted here from
// the file, not by the code under test).
inline int golden_f32_tensors(const std::string& name) {
  auto file = SafetensorsFile::open(golden_dir() + "/" + name + "/golden.safetensors");
  if (!file.ok()) {
    ADD_FAILURE() << file.status().message();
    return -1;
  }
  int n = 0;
  for (const auto& [tensor, info] : (*file)->tensors()) n += info.dtype == DType::kF32;
  return n;
}

struct CliResult {
  int code = -1;
  std::string output;  // stdout and stderr together
};

// Runs a shell command line and collects its output.
inline CliResult run_command(const std::string& command) {
  const std::string cmd = command + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  CliResult r;
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), p)) r.output.append(buf.data(), n);
  const int status = pclose(p);
  r.code = WEXITSTATUS(status);
  return r;
}

// Runs `dsv4 <args>` (a shell command line) and collects its output; env:
// assignments put in front of the command (e.g. "DSV4_ISA=generic").
inline CliResult run_dsv4(const std::string& args, const std::string& env = "") {
  return run_command(env + (env.empty() ? "" : " ") + std::string(DSV4_BINARY) + " " + args);
}

// The generated text of `dsv4 run`: the lines tagged [i] (not the log
// lines).
inline std::string generated_texts(const std::string& out) {
  std::istringstream in(out);
  std::string all;
  for (std::string line; std::getline(in, line);)
    if (std::regex_search(line, std::regex(R"(^\[[0-9]+\] )"))) all += line + "\n";
  return all;
}

// Greedy decoding of exactly max_tokens tokens (EOS does not stop it).
// Values of every kind a rounding through FP8/FP4 meets: normals, e4m3
// subnormals, exact ties, zeros of both signs, saturation, and blocks of
// tiny values and of zeros.
inline std::vector<float> hard_values(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) {
    const int kind = static_cast<int>(i % 6);
    const float r = std::ldexp(static_cast<float>(rng() % 4096) / 4096.0f, static_cast<int>(rng() % 40) - 30);
    if (kind == 0) x[i] = r;
    else if (kind == 1) x[i] = -r;
    else if (kind == 2) x[i] = (static_cast<float>(rng() % 64) + 0.5f) * std::ldexp(1.0f, -9);  // ties near subnormals
    else if (kind == 3) x[i] = (rng() % 2) ? 0.0f : -0.0f;
    else if (kind == 4) x[i] = (static_cast<float>(rng() % 16) + 8.5f) * std::ldexp(1.0f, static_cast<int>(rng() % 8));
    else x[i] = std::ldexp(static_cast<float>(rng() % 1000) - 500.0f, static_cast<int>(rng() % 20) - 10);
  }
  for (int64_t i = 0; i < 64 && 128 <= n; ++i) x[64 + i] = 1e-7f * static_cast<float>(i % 5);
  for (int64_t i = 0; i < 128 && 384 <= n; ++i) x[128 + i] = 1e-7f * static_cast<float>(i % 5), x[256 + i] = 0.0f;
  return x;
}

// The same float bits, element by element (a failure names the first that differs).
inline void expect_same_bits(const std::vector<float>& want, const std::vector<float>& got, const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    uint32_t a, b;
    std::memcpy(&a, &want[i], 4);
    std::memcpy(&b, &got[i], 4);
    ASSERT_EQ(a, b) << what << ": element " << i << " want " << want[i] << " got " << got[i];
  }
}

inline SamplingParams greedy(int64_t max_tokens) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  return p;
}

// Greedy-decodes 8 tokens after a fixed 40-token prompt on `engine`, to the
// end: how the placement tests compare layouts.
inline std::vector<int32_t> greedy_after_fixed_prompt(Engine& engine) {
  std::vector<int32_t> prompt;
  for (int i = 0; i < 40; ++i) prompt.push_back(5 + i * 13 % 200);
  EXPECT_TRUE(engine.add_request(prompt, greedy(8)).ok());
  std::vector<int32_t> out;
  while (engine.has_unfinished())
    for (const RequestOutput& o : engine.step()) out.insert(out.end(), o.new_tokens.begin(), o.new_tokens.end());
  return out;
}

inline double rel_l2(const float* a, const float* b, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; ++i) {
    num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    den += static_cast<double>(b[i]) * b[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// Rewrites the safetensors file at `path` through `edit(name, &dtype,
// &shape, &bytes)`, which may change a tensor or drop it (return false).
template <class Edit>
inline void rewrite_safetensors(const std::string& path, Edit edit) {
  SafetensorsWriter w;
  {
    auto file = SafetensorsFile::open(path);
    ASSERT_TRUE(file.ok()) << file.status().message();
    for (const auto& [name, t] : (*file)->tensors()) {
      std::vector<uint8_t> bytes(t.data, t.data + t.nbytes);
      DType dtype = t.dtype;
      std::vector<int64_t> shape = t.shape;
      if (!edit(name, &dtype, &shape, &bytes)) continue;
      w.add(name, dtype, shape, std::move(bytes));
    }
  }
  ASSERT_TRUE(w.write(path).ok());
}


// Two equal-size samples of outcomes (outcome -> counts in each): the
// two-sample chi-square statistic over the outcomes, those expected fewer
// than 10 times pooled into one cell, and its critical value at the 0.001
// level (Wilson-Hilferty).
struct ChiSquare {
  double statistic = 0.0, critical = 0.0;
  size_t cells = 0;
};
// The chi-square distribution's 0.999 quantile with df degrees of freedom
// (Wilson-Hilferty).
inline double chi_square_critical(int df) {
  const double z = 3.090232, w = 2.0 / (9.0 * std::max(df, 1));
  return df * std::pow(1.0 - w + z * std::sqrt(w), 3);
}
template <class Outcome>
ChiSquare two_sample_chi_square(const std::map<Outcome, std::pair<int, int>>& counts) {
  std::vector<std::pair<int, int>> cells;
  std::pair<int, int> pooled{0, 0};
  for (const auto& [outcome, c] : counts) {
    if (c.first + c.second >= 20) cells.push_back(c);
    else pooled.first += c.first, pooled.second += c.second;
  }
  if (pooled.first + pooled.second > 0) cells.push_back(pooled);
  ChiSquare r;
  r.cells = cells.size();
  for (const auto& [a, b] : cells) r.statistic += static_cast<double>(a - b) * (a - b) / (a + b);
  r.critical = chi_square_critical(static_cast<int>(cells.size()) - 1);
  return r;
}

// Observed counts of outcomes 0..k-1 in n draws against probabilities p:
// the goodness-of-fit statistic, outcomes expected fewer than 5 times
// pooled into one cell, and its critical value at the 0.001 level.
inline ChiSquare chi_square_fit(const std::vector<int>& observed, const std::vector<float>& p, int n) {
  ChiSquare r;
  double pooled_observed = 0.0, pooled_expected = 0.0;
  for (size_t i = 0; i < observed.size(); ++i) {
    const double expected = n * static_cast<double>(p[i]);
    if (expected < 5.0) {
      pooled_observed += observed[i], pooled_expected += expected;
      continue;
    }
    r.statistic += (observed[i] - expected) * (observed[i] - expected) / expected;
    ++r.cells;
  }
  if (pooled_expected > 0.0) {
    r.statistic += (pooled_observed - pooled_expected) * (pooled_observed - pooled_expected) / pooled_expected;
    ++r.cells;
  }
  r.critical = chi_square_critical(static_cast<int>(r.cells) - 1);
  return r;
}

// mkmodel --preset small --dspark (with opt's weights) written to dir and
// loaded in fast numerics.
inline StatusOr<std::unique_ptr<DeepseekV4>> synthetic_dspark_model(const std::string& dir, const SyntheticOptions& opt) {
  PresetCounts counts;
  counts.dspark = true;
  DSV4_ASSIGN_OR_RETURN(ModelConfig config, synthetic_config("small", "", counts));
  DSV4_RETURN_IF_ERROR(write_synthetic_checkpoint(config, opt, dir));
  ModelOptions mo;
  mo.numerics = kernels::Numerics::kFast;
  return load_deepseek_v4(dir, mo);
}

}  // namespace dsv4::testing
