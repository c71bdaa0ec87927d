// DeepSeek-V4.1's forward against the official reference's goldens
// (tests/golden_v41), bit for bit through verify_v41_golden: every layer's
// streams, the DSpark taps and the logits of the prefill, then the logits
// of each decode step with the sequences batched and the DSpark drafts
// after it; the prompts whole, in chunks of 1, 7 and 64, and packed into
// one forward. Bad inputs are refused and change nothing.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <thread>

#include "base/thread_pool.h"
#include "checkpoint/config_json.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/v41_loader.h"
#include "dist/local_communicator.h"
#include "golden_v41_case.h"
#include "model/deepseek_v41.h"
#include "runtime/engine.h"
#include "runtime/local_executor.h"
#include "test_util.h"
#include "tools/v41_golden_verify.h"

namespace dsv4 {
namespace {

struct Case {
  ModelConfig config;
  std::unique_ptr<DeepseekV41> model;
};

Case load_case(const std::string& name) {
  Case c;
  auto model = load_deepseek_v41(golden_v41_dir(name));
  EXPECT_TRUE(model.ok()) << model.status().message();
  if (!model.ok()) return c;
  c.config = (*model)->config();
  c.model = std::move(*model);
  return c;
}

// How the prompts go in: chunk tokens at a time (0: whole), each prompt
// in its own forwards or both packed into the same ones.
struct Split {
  int64_t chunk = 0;
  bool packed = false;
};

class V41Golden : public ::testing::TestWithParam<std::tuple<std::string, Split>> {};

TEST_P(V41Golden, PrefillAndDecodeAreTheReferencesBitForBit) {
  const auto& [name, split] = GetParam();
  Case c = load_case(name);
  ASSERT_TRUE(c.model);
  auto report = verify_v41_golden(*c.model, {golden_v41_dir(name) + "/golden.safetensors", split.chunk, split.packed});
  ASSERT_TRUE(report.ok()) << report.status().message();
  EXPECT_TRUE(report->pass()) << report->format();
  // Every layer's streams, the taps, the prefill, decode and draft logits
  // and the confidences, each bit for bit; every draft token.
  EXPECT_EQ(report->compared(), c.config.n_layers + 5) << report->format();
  for (const TensorCheck& t : report->tensors) EXPECT_EQ(t.rel_l2, 0.0) << t.name;
  ASSERT_EQ(report->rates.size(), 1u);
  EXPECT_EQ(report->rates[0].match, report->rates[0].total);
  EXPECT_GT(report->rates[0].total, 0);
  EXPECT_EQ(report->greedy_match, report->greedy_total);
  EXPECT_EQ(report->prefill_match, 2);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, V41Golden,
    ::testing::Combine(::testing::Values("v41-tiny", "v41-fp8", "v41-prefix"),
                       ::testing::Values(Split{0, false}, Split{1, false}, Split{7, false}, Split{64, false},
                                         Split{0, true}, Split{7, true})),
    [](const auto& info) {
      const Split& s = std::get<1>(info.param);
      const std::string& name = std::get<0>(info.param);
      return std::string(name == "v41-tiny" ? "Tiny" : name == "v41-fp8" ? "Fp8" : "Prefix") + "_" +
             (s.chunk ? "Chunks" + std::to_string(s.chunk) : std::string("Whole")) + (s.packed ? "_Packed" : "");
    });

// Fast numerics (the weights packed for the fast kernels): every tensor
// within the case's bounds for another correct implementation (case.json,
// from the measured drift of the reference summed in float64), and
// batch-invariant: the prompts in chunks, or packed into the same forwards,
// give the same bits as whole; so do tensor-parallel ranks, each computing
// its block of the features.
TEST(V41Golden, FastNumericsStayWithinTheBoundsAndChangeWithNoLayout) {
  for (const char* name : {"v41-tiny", "v41-fp8", "v41-prefix"}) {
    SCOPED_TRACE(name);
    Case c = load_case(name);
    ASSERT_TRUE(c.model);
    const int64_t exact_bytes = c.model->weights().resident_bytes();
    c.model->use_fast_numerics();
    EXPECT_EQ(c.model->numerics(), kernels::Numerics::kFast);
    EXPECT_TRUE(c.model->weights().head.packed());
    EXPECT_TRUE(c.model->weights().blocks[0].ffn.experts[0].w1.packed());
    EXPECT_TRUE(c.model->weights().blocks[0].attn.wo_a.packed());
    EXPECT_TRUE(c.model->weights().blocks[0].attn.wo_a.panels.code_panels.size() > 0);
    EXPECT_FALSE(c.model->weights().embed.packed()) << "read by row";
    EXPECT_LT(c.model->weights().resident_bytes(), exact_bytes * 5 / 4) << "the stored copies are released";
    const std::string golden = golden_v41_dir(name) + "/golden.safetensors";
    auto bounds = GoldenBounds::for_run(golden, kernels::Numerics::kFast, false);
    ASSERT_TRUE(bounds.ok()) << bounds.status().message();
    EXPECT_GT(bounds->bound("layer_out.3"), 0.0);
    EXPECT_GT(bounds->dspark_ids_min, 0.5);
    std::vector<VerifyReport> reports;
    for (const Split split : {Split{0, false}, Split{7, false}, Split{7, true}}) {
      auto report = verify_v41_golden(*c.model, {golden, split.chunk, split.packed, *bounds});
      ASSERT_TRUE(report.ok()) << report.status().message();
      EXPECT_TRUE(report->pass()) << report->format();
      EXPECT_EQ(report->compared(), c.config.n_layers + 5) << report->format();
      reports.push_back(*report);
    }
    for (size_t r = 1; r < reports.size(); ++r)
      for (size_t i = 0; i < reports[0].tensors.size(); ++i)
        EXPECT_EQ(reports[r].tensors[i].rel_l2, reports[0].tensors[i].rel_l2) << reports[0].tensors[i].name;
    // Two tensor-parallel ranks in fast numerics, loaded so.
    auto world = LocalCommunicator::create(2);
    std::vector<std::unique_ptr<DeepseekV41>> models;
    for (int r = 0; r < 2; ++r) {
      auto model = load_deepseek_v41(golden_v41_dir(name), {}, RankShards{ExpertShard{r, 2}, TensorShard{r, 2}},
                                     kernels::Numerics::kFast);  // packed as they are read
      ASSERT_TRUE(model.ok()) << model.status().message();
      EXPECT_EQ((*model)->numerics(), kernels::Numerics::kFast);
      EXPECT_TRUE((*model)->weights().blocks[1].attn.wq_b.packed());
      (*model)->set_expert_group(world[r].get());
      (*model)->set_tensor_group(world[r].get());
      models.push_back(std::move(*model));
    }
    std::vector<StatusOr<VerifyReport>> ranks(2, Status(StatusCode::kInternal, "not run"));
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r)
      threads.emplace_back([&, r] { ranks[r] = verify_v41_golden(*models[r], {golden, 7, true, *bounds}); });
    for (auto& t : threads) t.join();
    for (int r = 0; r < 2; ++r) {
      ASSERT_TRUE(ranks[r].ok()) << ranks[r].status().message();
      for (size_t i = 0; i < reports[0].tensors.size(); ++i)
        EXPECT_EQ(ranks[r]->tensors[i].rel_l2, reports[0].tensors[i].rel_l2) << "TP2 rank " << r << " "
                                                                              << reports[0].tensors[i].name;
    }
  }
}

// A logical worker pool that only counts (ThreadPool::simulated).
struct QuietObserver : JobObserver {
  void read(const void*, int64_t) override {}
  void job_begins(int64_t) override {}
  void tile_begins(int64_t) override {}
  void tile_ends(double) override {}
  void job_ends() override {}
  void phase_changes(Phase, Phase) override {}
};

// On a many-core node a decode step's one row is attended a group of heads
// a task (a head a task on 64 workers), its index keys scored in runs and
// its SwiGLU in pieces of the row: on a simulated 64-worker pool exact
// numerics stay the reference's bits, and fast numerics give the bits they
// give on one worker.
TEST(V41Golden, ManyWorkersKeepEachNumericsBits) {
  QuietObserver quiet;
  auto one = ThreadPool::simulated(1, &quiet), wide = ThreadPool::simulated(64, &quiet);
  const std::string golden = golden_v41_dir("v41-fp8") + "/golden.safetensors";
  for (const bool fast : {false, true}) {
    SCOPED_TRACE(fast ? "fast" : "exact");
    Case c = load_case("v41-fp8");
    ASSERT_TRUE(c.model);
    if (fast) c.model->use_fast_numerics();
    auto bounds = GoldenBounds::for_run(golden, c.model->numerics(), false);
    ASSERT_TRUE(bounds.ok()) << bounds.status().message();
    std::vector<VerifyReport> reports;
    for (ThreadPool* pool : {one.get(), wide.get()}) {
      ThreadPool::Scope scope(pool);
      auto report = verify_v41_golden(*c.model, {golden, 0, false, *bounds});
      ASSERT_TRUE(report.ok()) << report.status().message();
      EXPECT_TRUE(report->pass()) << report->format();
      reports.push_back(*report);
    }
    ASSERT_EQ(reports[0].tensors.size(), reports[1].tensors.size());
    for (size_t i = 0; i < reports[0].tensors.size(); ++i) {
      EXPECT_EQ(reports[1].tensors[i].rel_l2, reports[0].tensors[i].rel_l2) << reports[0].tensors[i].name;
      if (!fast) {
        EXPECT_EQ(reports[1].tensors[i].rel_l2, 0.0) << reports[1].tensors[i].name;
      }
    }
  }
}

// A prefix-cache hit against the reference (v41-prefix: two 300-token
// prompts, the second starting with the first's 256 tokens). Served one
// after the other through the engine's paged caches, the second takes two
// 128-token blocks from the cache, with their KV and index sources, the
// candidate blocks and Engram's look-back, and computes only the rest: its
// prompt's logits and every decode step's are the reference's bit for bit,
// on one rank and on data-parallel ranks (where the second request may land
// on the group without the blocks); in fast numerics the hit changes no bit
// of a cold fast run.
TEST(V41Golden, APrefixCacheHitIsTheReferencesBitForBit) {
  const std::string dir = golden_v41_dir("v41-prefix");
  auto file = SafetensorsFile::open(dir + "/golden.safetensors");
  ASSERT_TRUE(file.ok()) << file.status().message();
  const auto prompts = read_tensor<int64_t>(**file, "prompt_ids");
  const auto decode_ids = read_tensor<int64_t>(**file, "decode_ids");
  const auto prefill_logits = read_tensor<float>(**file, "prefill_logits");
  const auto decode_logits = read_tensor<float>(**file, "decode_logits");
  auto config = load_any_model_config(dir + "/config.json");
  ASSERT_TRUE(config.ok()) << config.status().message();
  const int64_t V = config->vocab_size, B = 2, S = static_cast<int64_t>(prompts.size()) / B;
  const int64_t T = static_cast<int64_t>(decode_ids.size()) / B;
  ASSERT_EQ(S, 300);
  ASSERT_TRUE(std::equal(prompts.begin(), prompts.begin() + 256, prompts.begin() + S)) << "the prompts share 256 tokens";
  struct Served {
    std::vector<int32_t> tokens;
    std::map<int64_t, std::vector<float>> logits;  // position -> logits
    int64_t cached = 0;
  };
  auto serve = [&](int dp, kernels::Numerics numerics, const std::vector<int64_t>& order) {
    EngineOptions options;
    options.scheduler.max_model_len = config->max_position_embeddings;
    options.cache.enable_prefix_caching = true;
    auto cache = Engine::cache_options(*config, options);
    EXPECT_TRUE(cache.ok()) << cache.status().message();
    ModelOptions model;
    model.numerics = numerics;
    ParallelOptions p;
    p.topology.dp = dp;
    auto exec = LocalExecutor::create(dir, model, p, *cache);
    EXPECT_TRUE(exec.ok()) << exec.status().message();
    auto engine = Engine::create(std::move(*exec), options.scheduler);
    EXPECT_TRUE(engine.ok()) << engine.status().message();
    std::map<int64_t, Served> runs;
    (*engine)->set_logits_observer([&](int64_t id, int64_t pos, const float* l) { runs[id].logits[pos].assign(l, l + V); });
    std::vector<Served> out;
    for (int64_t b : order) {  // one request after the other
      std::vector<int32_t> prompt(prompts.begin() + b * S, prompts.begin() + (b + 1) * S);
      auto id = (*engine)->add_request(prompt, testing::greedy(T));
      EXPECT_TRUE(id.ok()) << id.status().message();
      while ((*engine)->has_unfinished())
        for (const RequestOutput& o : (*engine)->step()) {
          EXPECT_TRUE(o.error.empty()) << o.error;
          runs[o.id].tokens.insert(runs[o.id].tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
          runs[o.id].cached = o.cached_tokens;
        }
      out.push_back(runs[*id]);
    }
    return out;
  };
  // Prompt b's logits: the prompt's, then decode step t's (the reference's tokens being the greedy ones).
  auto expect_reference = [&](const Served& got, int64_t b, const std::string& what) {
    ASSERT_EQ(got.tokens.size(), static_cast<size_t>(T)) << what;
    for (int64_t t = 0; t < T; ++t) EXPECT_EQ(got.tokens[t], decode_ids[t * B + b]) << what << " token " << t;
    ASSERT_TRUE(got.logits.count(S - 1)) << what;
    EXPECT_EQ(0, std::memcmp(got.logits.at(S - 1).data(), &prefill_logits[b * V], sizeof(float) * V)) << what;
    for (int64_t t = 0; t + 1 < T; ++t) {
      ASSERT_TRUE(got.logits.count(S + t)) << what << " step " << t;
      EXPECT_EQ(0, std::memcmp(got.logits.at(S + t).data(), &decode_logits[(t * B + b) * V], sizeof(float) * V))
          << what << ": decode step " << t << " differs from the reference";
    }
  };
  for (int dp : {1, 2}) {
    const std::string layout = "DP" + std::to_string(dp);
    const auto served = serve(dp, kernels::Numerics::kExact, {0, 1, 1});
    EXPECT_EQ(served[0].cached, 0) << layout;
    if (dp == 1) {
      EXPECT_EQ(served[1].cached, 256) << layout << ": two whole blocks of the first prompt";
      EXPECT_EQ(served[2].cached, 256) << layout;
    }
    expect_reference(served[0], 0, layout + " the first prompt, computed");
    expect_reference(served[1], 1, layout + " the second, after a hit");
    expect_reference(served[2], 1, layout + " the second again");
  }
  const auto cold = serve(1, kernels::Numerics::kFast, {1});
  const auto hit = serve(1, kernels::Numerics::kFast, {0, 1});
  EXPECT_EQ(hit[1].cached, 256);
  EXPECT_EQ(hit[1].tokens, cold[0].tokens);
  for (const auto& [pos, row] : cold[0].logits)
    EXPECT_EQ(0, std::memcmp(hit[1].logits.at(pos).data(), row.data(), sizeof(float) * V)) << "fast, position " << pos;
}

// Expert-parallel ranks (threads, each holding its block of the routed
// experts, the DSpark stages' too) and tensor-parallel ranks (each also
// holding its block of the heads and of the dense linears' features, the
// experts still split over all of them) run the whole protocol together:
// every tensor bit for bit, on every rank, with FlashComm1 (every prefill
// forward's residual stream split by rows) too. The forwards' slots travel
// to their experts' ranks and back (model/expert_dispatch.h); on four
// tensor-parallel ranks of the cases' two output groups each group spans
// two ranks.
TEST(V41Golden, ParallelRanksAreTheReferencesBitForBit) {
  struct Run {
    const char* name;
    int ranks;
    bool tensor_parallel;
    int64_t chunk;
    bool flashcomm = false;
  };
  for (const Run& run : {Run{"v41-fp8", 2, false, 7}, Run{"v41-tiny", 4, false, 0}, Run{"v41-fp8", 2, true, 7},
                         Run{"v41-tiny", 4, true, 0, true}, Run{"v41-fp8", 4, true, 7, true},
                         Run{"v41-prefix", 4, true, 64, true}}) {
    const char* name = run.name;
    const int ranks = run.ranks;
    const int64_t chunk = run.chunk;
    SCOPED_TRACE(std::string(name) + (run.tensor_parallel ? " TP" : " EP") + std::to_string(ranks) +
                 (run.flashcomm ? " FlashComm1" : ""));
    auto world = LocalCommunicator::create(ranks);
    std::vector<std::unique_ptr<DeepseekV41>> models;
    for (int r = 0; r < ranks; ++r) {
      const TensorShard tensor = run.tensor_parallel ? TensorShard{r, ranks} : TensorShard{};
      auto model = load_deepseek_v41(golden_v41_dir(name), {}, RankShards{ExpertShard{r, ranks}, tensor});
      ASSERT_TRUE(model.ok()) << model.status().message();
      (*model)->set_expert_group(world[r].get());
      if (run.tensor_parallel) (*model)->set_tensor_group(world[r].get(), FlashCommOptions{run.flashcomm, 1});
      models.push_back(std::move(*model));
    }
    const V41VerifyOptions options{golden_v41_dir(name) + "/golden.safetensors", chunk, true};
    std::vector<StatusOr<VerifyReport>> reports(ranks, Status(StatusCode::kInternal, "not run"));
    std::vector<std::thread> threads;
    for (int r = 0; r < ranks; ++r) threads.emplace_back([&, r] { reports[r] = verify_v41_golden(*models[r], options); });
    for (auto& t : threads) t.join();
    Case whole = load_case(name);
    ASSERT_TRUE(whole.model);
    for (int r = 0; r < ranks; ++r) {
      ASSERT_TRUE(reports[r].ok()) << name << " rank " << r << ": " << reports[r].status().message();
      EXPECT_TRUE(reports[r]->pass()) << name << " rank " << r << "\n" << reports[r]->format();
      EXPECT_EQ(reports[r]->compared(), whole.config.n_layers + 5) << reports[r]->format();
      for (const TensorCheck& t : reports[r]->tensors) EXPECT_EQ(t.rel_l2, 0.0) << name << " rank " << r << " " << t.name;
      EXPECT_EQ(reports[r]->greedy_match, reports[r]->greedy_total);
      EXPECT_LT(models[r]->weights().resident_bytes(), whole.model->weights().resident_bytes())
          << "rank " << r << " holds only its share";
      if (run.tensor_parallel) {
        EXPECT_EQ(static_cast<int>(models[r]->weights().blocks[0].attn.attn_sink.size()) * ranks, whole.config.n_heads);
      }
      EXPECT_EQ(models[r]->flashcomm_forwards() > 0, run.flashcomm);
    }
  }
}

// Decode rows given together (a speculative step's verification, or a
// request recomputing after a preemption) are what the reference's decode
// steps compute one at a time: a row whose index layer reads a later
// source's keys waits for them (v41_first_row_after_unwritten_keys).
TEST(V41Golden, DecodeRowsTogetherAreTheDecodeStepsBitForBit) {
  Case c = load_case("v41-fp8");
  ASSERT_TRUE(c.model);
  auto golden = SafetensorsFile::open(golden_v41_dir("v41-fp8") + "/golden.safetensors");
  ASSERT_TRUE(golden.ok());
  const std::vector<int64_t> ids = read_tensor<int64_t>(**golden, "prompt_ids");
  const std::vector<int64_t> decode = read_tensor<int64_t>(**golden, "decode_ids");
  const int64_t S = (*golden)->find("prompt_ids")->shape[1], B = 2, T = 8;
  std::vector<int32_t> tokens(ids.begin(), ids.begin() + S);  // prompt 0, then its decode tokens
  for (int64_t t = 0; t < T; ++t) tokens.push_back(static_cast<int32_t>(decode[t * B]));
  auto history = [&](int64_t start) {
    const int64_t back = std::min<int64_t>(start, c.model->history_tokens());
    return std::vector<int32_t>(tokens.begin() + start - back, tokens.begin() + start);
  };
  auto run = [&](SequenceCache* cache, int64_t start, int64_t n, int64_t logit_rows, std::vector<float>* logits) {
    ForwardBatch batch;
    batch.add(cache, &tokens[start], n, S, logit_rows);
    batch.chunks.back().history = history(start);
    ForwardOutput out;
    ASSERT_TRUE(c.model->forward(batch, &out).ok());
    logits->insert(logits->end(), out.logits.begin(), out.logits.end());
  };
  // One decode step at a time: the prompt's last logits, then each step's.
  auto steps = c.model->new_cache();
  std::vector<float> want;
  run(steps.get(), 0, S, 1, &want);
  for (int64_t t = 0; t < T - 1; ++t) run(steps.get(), S + t, 1, 1, &want);
  // The decode tokens in one chunk after the prompt.
  auto together = c.model->new_cache();
  std::vector<float> got;
  run(together.get(), 0, S, 1, &got);
  run(together.get(), S, T - 1, T - 1, &got);
  testing::expect_same_bits(want, got, "decode rows in one chunk");
  // The prompt and its decode tokens in one chunk, as after a preemption.
  auto recompute = c.model->new_cache();
  std::vector<float> again;
  run(recompute.get(), 0, S + T - 1, T, &again);
  testing::expect_same_bits(want, again, "prompt and decode rows in one chunk");
  // The recomputing chunk is the one that must be cut (after the prompt,
  // decode rows read only keys written before).
  EXPECT_LT(v41_first_row_after_unwritten_keys(c.config, 0, S + T - 1, S), S + T - 1);
  EXPECT_EQ(v41_first_row_after_unwritten_keys(c.config, S, T - 1, S), T - 1);
}

// dsv4 verify runs the protocol on a V4.1 case: exact and fast numerics,
// one rank and tensor-, data- and expert-parallel ranks.
TEST(V41Golden, VerifyCliPassesTheCasesInEitherNumericsAndOnRanks) {
  for (const char* name : {"v41-tiny", "v41-fp8"}) {
    auto run = testing::run_dsv4("verify --model " + golden_v41_dir(name) + " --chunk 7");
    EXPECT_EQ(run.code, 0) << run.output;
    EXPECT_NE(run.output.find("dspark_ids"), std::string::npos) << run.output;
    EXPECT_NE(run.output.find("prefill chunks of 7"), std::string::npos) << run.output;
  }
  auto ranks = testing::run_dsv4("verify --model " + golden_v41_dir("v41-fp8") + " --chunk 7 --dp 2");
  EXPECT_EQ(ranks.code, 0) << ranks.output;
  EXPECT_NE(ranks.output.find("2 ranks: TP1 x DP2, EP2, every data-parallel group running every prompt"),
            std::string::npos)
      << ranks.output;
  auto fast = testing::run_dsv4("verify --model " + golden_v41_dir("v41-tiny") + " --numerics fast --chunk 7");
  EXPECT_EQ(fast.code, 0) << fast.output;
  EXPECT_NE(fast.output.find("numerics fast"), std::string::npos) << fast.output;
  EXPECT_NE(fast.output.find("PASS"), std::string::npos) << fast.output;
  auto tp = testing::run_dsv4("verify --model " + golden_v41_dir("v41-tiny") +
                              " --tp 2 --dp 2 --ep 4 --chunk 7 --enable-flashcomm1 --flashcomm1-sp-min-token-num 1");
  EXPECT_EQ(tp.code, 0) << tp.output;
  EXPECT_NE(tp.output.find("4 ranks: TP2 x DP2, EP4"), std::string::npos) << tp.output;
  EXPECT_TRUE(std::regex_search(tp.output, std::regex("FlashComm1: [1-9][0-9]* forwards"))) << tp.output;
  EXPECT_NE(tp.output.find("PASS"), std::string::npos) << tp.output;
}

TEST(V41Golden, AMissingTensorIsAnErrorNamingIt) {
  auto config = parse_v41_model_config(read_text_file(golden_v41_dir("v41-tiny") + "/config.json"), "v41-tiny");
  ASSERT_TRUE(config.ok());
  config->n_layers += 1;  // a layer the checkpoint does not have
  config->compress_ratios.insert(config->compress_ratios.begin() + config->n_layers - 1, 0);
  auto weights = load_v41_weights(golden_v41_dir("v41-tiny"), *config);
  ASSERT_FALSE(weights.ok());
  EXPECT_NE(weights.status().message().find("layers.10."), std::string::npos) << weights.status().message();
}

TEST(V41Golden, AShapeTheConfigDoesNotGiveIsAnErrorNamingTensorAndShapes) {
  auto config = parse_v41_model_config(read_text_file(golden_v41_dir("v41-tiny") + "/config.json"), "v41-tiny");
  ASSERT_TRUE(config.ok());
  config->dim *= 2;
  auto weights = load_v41_weights(golden_v41_dir("v41-tiny"), *config);
  ASSERT_FALSE(weights.ok());
  EXPECT_NE(weights.status().message().find("embed.weight has shape [1024, 128], the config says [1024, 256]"),
            std::string::npos)
      << weights.status().message();
}

// The window rows [0, n) of cache layers `layers`, as bytes.
std::vector<uint8_t> window_bytes(SequenceCache& cache, const CacheGeometry& g, const std::vector<int>& layers, int64_t n) {
  std::vector<uint8_t> out;
  for (int l : layers)
    for (int64_t p = 0; p < n; ++p) out.insert(out.end(), cache.window_row(l, p), cache.window_row(l, p) + g.window_row_bytes);
  return out;
}

// One chunk of `tokens` for `cache`, with Engram's look-back.
ForwardBatch one_chunk(SequenceCache* cache, std::vector<int32_t> tokens, int64_t prefill_len,
                       std::vector<int32_t> history = {}) {
  ForwardBatch batch;
  batch.add(cache, tokens.data(), static_cast<int64_t>(tokens.size()), prefill_len);
  batch.chunks.back().history = std::move(history);
  return batch;
}

TEST(V41Golden, BadForwardInputsAreRefusedAndTheSequenceKept) {
  Case c = load_case("v41-tiny");
  ASSERT_TRUE(c.model);
  const CacheGeometry g = CacheGeometry::of(c.config);
  auto seq = c.model->new_cache();
  ForwardOutput out;
  ASSERT_TRUE(c.model->forward(one_chunk(seq.get(), {5, 6, 7}, 3), &out).ok());
  const std::vector<uint8_t> rows = window_bytes(*seq, g, {0, 9}, 3);
  const Status outside = c.model->forward(one_chunk(seq.get(), {8, 1024}, 5, {5, 6, 7}), &out);
  ASSERT_FALSE(outside.ok());
  EXPECT_NE(outside.message().find("token id 1024 is outside the vocabulary [0, 1024)"), std::string::npos)
      << outside.message();
  EXPECT_FALSE(c.model->forward(one_chunk(seq.get(), {}, 3, {5, 6, 7}), &out).ok());
  ForwardBatch twice = one_chunk(seq.get(), {8}, 3, {5, 6, 7});
  twice.chunks.push_back(twice.chunks.back());
  twice.token_ids.push_back(9);
  twice.chunks.back().row_begin = 1;
  EXPECT_FALSE(c.model->forward(twice, &out).ok());
  // Engram's look-back must come with the tokens: the 3 before position 3.
  const Status no_history = c.model->forward(one_chunk(seq.get(), {8}, 3), &out);
  ASSERT_FALSE(no_history.ok());
  EXPECT_NE(no_history.message().find("needs the 3 tokens before it for Engram, got 0"), std::string::npos)
      << no_history.message();
  EXPECT_FALSE(c.model->forward_mtp(0, one_chunk(seq.get(), {8}, 3, {5, 6, 7}), nullptr, &out, false).ok());
  // Nothing of a refused forward reaches the sequence.
  EXPECT_EQ(seq->length, 3);
  EXPECT_EQ(window_bytes(*seq, g, {0, 9}, 3), rows);
  EXPECT_TRUE(c.model->forward(one_chunk(seq.get(), {8}, 3, {5, 6, 7}), &out).ok());
}

TEST(V41Golden, BadDraftCallsAreRefusedAndTheRingsKept) {
  Case c = load_case("v41-tiny");
  ASSERT_TRUE(c.model);
  const ModelConfig& cfg = c.config;
  const CacheGeometry g = CacheGeometry::of(cfg);
  std::vector<int> stages;
  for (int s = 0; s < cfg.dspark_stages; ++s) stages.push_back(cfg.dspark_cache_layer(s));
  auto seq = c.model->new_cache();
  ForwardBatch batch = one_chunk(seq.get(), {5, 6, 7}, 3);
  batch.want_taps = true;
  ForwardOutput out;
  ASSERT_TRUE(c.model->forward(batch, &out).ok());
  ASSERT_TRUE(c.model->dspark_fill(seq.get(), out.taps.data(), 3, 0).ok());
  const std::vector<uint8_t> rings = window_bytes(*seq, g, stages, 3);
  const float* tap = &out.taps[2 * cfg.dspark_taps() * cfg.dim];
  auto call = [&](int64_t position, int32_t anchor, const float* t) {
    DSparkCall d;
    d.cache = seq.get();
    d.position = position;
    d.anchor = anchor;
    d.tap = t;
    return d;
  };
  std::vector<DSparkDraft> drafts;
  const Status outside = c.model->dspark_draft({call(2, cfg.vocab_size, tap)}, &drafts);
  ASSERT_FALSE(outside.ok());
  EXPECT_NE(outside.message().find("anchor 1024 is outside the vocabulary"), std::string::npos) << outside.message();
  EXPECT_FALSE(c.model->dspark_draft({call(0, 5, tap)}, &drafts).ok());  // nothing decoded yet
  EXPECT_FALSE(c.model->dspark_draft({call(2, 5, nullptr)}, &drafts).ok());
  const std::vector<int32_t> bad_chain(cfg.dspark_block_size, -1);
  DSparkCall forced = call(2, 5, tap);
  forced.forced_prev = bad_chain.data();
  EXPECT_FALSE(c.model->dspark_draft({forced}, &drafts).ok());
  EXPECT_EQ(window_bytes(*seq, g, stages, 3), rings);
  // A good call drafts the block: the anchor, then K tokens in the vocabulary.
  ASSERT_TRUE(c.model->dspark_draft({call(2, 5, tap)}, &drafts).ok());
  ASSERT_EQ(drafts.size(), 1u);
  ASSERT_EQ(drafts[0].ids.size(), static_cast<size_t>(cfg.dspark_block_size + 1));
  EXPECT_EQ(drafts[0].ids[0], 5);
  for (int32_t id : drafts[0].ids) EXPECT_TRUE(id >= 0 && id < cfg.vocab_size);
}

}  // namespace
}  // namespace dsv4
