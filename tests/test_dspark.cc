// The DSpark drafter against ../shared/golden/DSPARK.md: its config (stages
// counted from compress_ratios), and both protocols on dspark-tiny (BF16)
// and dspark-fp8 (the released formats) in exact and fast numerics, whole
// and chunked prefill. In exact numerics the drafter fed the golden taps is
// bit-identical to the reference.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <map>
#include <random>

#include <cstring>

#include "checkpoint/config_json.h"
#include "checkpoint/model_loader.h"
#include "temp_dir.h"
#include "tools/synthetic.h"
#include "checkpoint/safetensors.h"
#include "runtime/engine.h"
#include "runtime/local_executor.h"
#include "kv/kv_cache_manager.h"
#include "model/contiguous_cache.h"
#include "model/deepseek_v4.h"
#include "runtime/sampler.h"
#include "test_util.h"
#include "tools/dspark_verify.h"
#include "tools/parallel_verify.h"

namespace dsv4 {
namespace {

using testing::golden_dir;
using testing::golden_model;

TEST(DSpark, StagesAreCountedFromCompressRatios) {
  auto c = load_model_config(golden_dir() + "/dspark-tiny/config.json");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_TRUE(c->has_dspark());
  EXPECT_EQ(c->dspark_stages, 3) << "num_nextn_predict_layers says 1; the stages are mtp.0..2";
  EXPECT_EQ(c->n_mtp_layers, 0);
  EXPECT_EQ(c->dspark_block_size, 5);
  EXPECT_EQ(c->dspark_target_layer_ids, std::vector<int>({2, 3, 4}));
  EXPECT_EQ(c->compress_ratios.size(), 8u);
  // A config written back reads the same.
  auto again = parse_model_config(model_config_json(*c), "rewritten");
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(again->dspark_stages, 3);
  EXPECT_EQ(again->dspark_noise_token_id, c->dspark_noise_token_id);
  // Broken DSpark keys name the problem.
  const nlohmann::json good = nlohmann::json::parse(model_config_json(*c));
  auto broken = [&](const char* key, nlohmann::json value) {
    nlohmann::json j = good;
    j[key] = std::move(value);
    auto r = parse_model_config(j.dump(), "broken");
    return r.ok() ? std::string("accepted") : r.status().message();
  };
  EXPECT_NE(broken("dspark_noise_token_id", 4096).find("dspark_noise_token_id"), std::string::npos);
  EXPECT_NE(broken("dspark_target_layer_ids", {2, 9}).find("dspark_target_layer_ids"), std::string::npos);
  EXPECT_NE(broken("dspark_target_layer_ids", {3, 2}).find("dspark_target_layer_ids"), std::string::npos);
  EXPECT_NE(broken("dspark_markov_rank", 0).find("dspark_markov_rank"), std::string::npos);
  EXPECT_NE(broken("compress_ratios", {0, 0, 4, 128, 4, 0, 4, 0}).find("DSpark stage 1"), std::string::npos);
  EXPECT_NE(broken("compress_ratios", {0, 0, 4, 128, 4}).find("DSpark stages"), std::string::npos);
}

// The outputs a protocol compares (DSPARK.md): every F32 tensor of the
// golden but the Exp(1) noise it feeds, and in the isolated protocol also
// but the target's logits and taps (the drafter is fed those).
int dspark_outputs(const std::string& name, bool end_to_end) {
  return testing::golden_f32_tensors(name) - 1 - (end_to_end ? 0 : 4);
}

struct Case {
  const char* name;
  kernels::Numerics numerics;
  int chunk;
};

class DSparkGolden : public ::testing::TestWithParam<Case> {};

TEST_P(DSparkGolden, BothProtocolsWithinTheirBounds) {
  const Case& p = GetParam();
  const DeepseekV4& model = golden_model(p.name, p.numerics);
  for (bool end_to_end : {false, true}) {
    DSparkVerifyOptions o;
    o.golden_path = golden_dir() + "/" + p.name + "/golden.safetensors";
    o.end_to_end = end_to_end;
    o.chunk = p.chunk;
    auto report = verify_dspark(model, o);
    ASSERT_TRUE(report.ok()) << report.status().message();
    EXPECT_TRUE(report->pass()) << (end_to_end ? "end to end\n" : "isolated\n") << report->format();
    EXPECT_EQ(report->compared(), dspark_outputs(p.name, end_to_end)) << report->format();
    EXPECT_EQ(report->tensors.size(), static_cast<size_t>(report->compared())) << report->format();
    if (p.numerics == kernels::Numerics::kExact && !end_to_end) {
      for (const TensorCheck& t : report->tensors) EXPECT_EQ(t.rel_l2, 0.0) << t.name << " is not bit-identical";
    }
  }
}

// Ranks as threads on TP2 and TP4 (experts over the same ranks): both
// protocols within their bounds, the drafter fed the golden taps
// bit-identical to the reference as on one rank.
TEST(DSpark, GoldenOnTensorParallelRanks) {
  for (int tp : {2, 4}) {
    for (bool end_to_end : {false, true}) {
      DSparkVerifyOptions o;
      o.golden_path = golden_dir() + "/dspark-fp8/golden.safetensors";
      o.end_to_end = end_to_end;
      o.chunk = tp == 2 ? 37 : 0;
      ParallelVerifyOptions p;
      p.topology.tp = tp;
      auto report = verify_dspark_parallel(golden_dir() + "/dspark-fp8", o, p);
      ASSERT_TRUE(report.ok()) << report.status().message();
      EXPECT_TRUE(report->pass()) << "TP" << tp << (end_to_end ? " end to end\n" : " isolated\n") << report->format();
      EXPECT_EQ(report->compared(), dspark_outputs("dspark-fp8", end_to_end)) << report->format();
      if (!end_to_end) {
        for (const TensorCheck& t : report->tensors) EXPECT_EQ(t.rel_l2, 0.0) << "TP" << tp << " " << t.name;
      }
    }
  }
  ParallelVerifyOptions dp;
  dp.topology.dp = 2;
  DSparkVerifyOptions o;
  o.golden_path = golden_dir() + "/dspark-fp8/golden.safetensors";
  EXPECT_FALSE(verify_dspark_parallel(golden_dir() + "/dspark-fp8", o, dp).ok()) << "one data-parallel group only";
}

// dsv4 convert --to w8a8 takes the drafter's linears too (main_proj, the
// stages' projections and experts, the Markov head's w2): the converted
// dspark-fp8 loads with a W8A8 drafter and passes both protocols within
// the case's end-to-end bounds (W8A8 re-quantizes the weights, so the
// reference's roundings are not there to match).
TEST(DSpark, W8a8ConversionCoversTheDrafter) {
  testing::TempDir dir("dsv4_test_dspark_w8a8");
  auto r = testing::run_dsv4("convert --to w8a8 --model " + golden_dir() + "/dspark-fp8 --out " + dir.path());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("251 linears to W8A8"), std::string::npos) << r.output;
  ModelOptions mo;
  mo.numerics = kernels::Numerics::kFast;
  auto model = load_deepseek_v4(dir.path(), mo);
  ASSERT_TRUE(model.ok()) << model.status().message();
  const DSparkWeights& d = *(*model)->weights().dspark;
  EXPECT_EQ(d.main_proj.format, WeightFormat::kInt8Channel);
  EXPECT_EQ(d.stages[0].attn.wkv.format, WeightFormat::kInt8Channel);
  for (bool end_to_end : {false, true}) {
    DSparkVerifyOptions o;
    o.golden_path = golden_dir() + "/dspark-fp8/golden.safetensors";
    o.end_to_end = end_to_end;
    auto report = verify_dspark(**model, o);
    ASSERT_TRUE(report.ok()) << report.status().message();
    EXPECT_TRUE(report->pass()) << (end_to_end ? "end to end\n" : "isolated\n") << report->format();
    EXPECT_EQ(report->compared(), dspark_outputs("dspark-fp8", end_to_end)) << report->format();
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, DSparkGolden,
                         ::testing::Values(Case{"dspark-tiny", kernels::Numerics::kExact, 0},
                                           Case{"dspark-tiny", kernels::Numerics::kExact, 37},
                                           Case{"dspark-tiny", kernels::Numerics::kFast, 64},
                                           Case{"dspark-fp8", kernels::Numerics::kExact, 0},
                                           Case{"dspark-fp8", kernels::Numerics::kFast, 0}),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           std::string n = std::string(i.param.name) + (i.param.numerics == kernels::Numerics::kExact ? "_exact" : "_fast");
                           if (i.param.chunk) n += "_chunk" + std::to_string(i.param.chunk);
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace dsv4

namespace dsv4 {
namespace {

struct Job {
  std::vector<int32_t> prompt;
  SamplingParams params;
};

struct Outcome {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::map<int64_t, std::vector<float>>> logits;    // per job: position -> logits
  std::vector<std::map<int64_t, std::vector<int32_t>>> drafts;  // per job: position -> drafts
  std::vector<size_t> prompt_scores;                             // per job: prompt positions scored
  EngineStats stats;
};

Outcome run(std::unique_ptr<Engine> engine, const std::vector<Job>& jobs) {
  Outcome out;
  out.tokens.resize(jobs.size());
  out.logits.resize(jobs.size());
  out.drafts.resize(jobs.size());
  out.prompt_scores.resize(jobs.size());
  std::map<int64_t, size_t> job_of;
  const int64_t vocab = engine->config().vocab_size;
  engine->set_logits_observer([&, vocab](int64_t id, int64_t pos, const float* logits) {
    out.logits[job_of.at(id)][pos].assign(logits, logits + vocab);
  });
  engine->set_draft_observer([&](int64_t id, int64_t pos, const std::vector<int32_t>& drafts) {
    out.drafts[job_of.at(id)][pos] = drafts;
  });
  for (size_t j = 0; j < jobs.size(); ++j) {
    auto id = engine->add_request(jobs[j].prompt, jobs[j].params);
    EXPECT_TRUE(id.ok()) << id.status().message();
    job_of[*id] = j;
  }
  while (engine->has_unfinished())
    for (const RequestOutput& o : engine->step()) {
      out.tokens[job_of.at(o.id)].insert(out.tokens[job_of.at(o.id)].end(), o.new_tokens.begin(), o.new_tokens.end());
      out.prompt_scores[job_of.at(o.id)] += o.prompt_logprobs.size();
    }
  out.stats = engine->stats();
  return out;
}

EngineOptions dspark_options(int k) {
  EngineOptions o;
  o.scheduler.max_num_seqs = 8;
  o.scheduler.max_num_batched_tokens = 96;  // prompts prefill in chunks, their rings fill across steps
  o.scheduler.num_speculative_tokens = k;
  o.scheduler.drafter = SchedulerOptions::Drafter::kDSpark;
  o.cache.memory_bytes = int64_t{256} << 20;
  return o;
}

EngineOptions whole_prompt_options(EngineOptions o) {
  o.scheduler.max_num_batched_tokens = 1024;
  o.cache.enable_prefix_caching = false;
  return o;
}

std::vector<Job> dspark_jobs() {
  std::vector<Job> jobs;
  for (int i = 0; i < 5; ++i) {
    // 1 token (nothing to draft from at position 0), short, and past the
    // 128-slot ring.
    std::vector<int32_t> p(i == 0 ? 1 : i == 2 ? 160 : 30 + 60 * i);  // 160: the window starts on a page
    for (size_t t = 0; t < p.size(); ++t) p[t] = static_cast<int32_t>((t * 29 + i * 11 + 3) % 1000);
    jobs.push_back({p, testing::greedy(14 + 3 * i)});
    jobs.back().params.ignore_eos = true;
  }
  return jobs;
}

void expect_same(const Outcome& spec, const Outcome& plain, const std::string& what) {
  for (size_t j = 0; j < plain.tokens.size(); ++j) {
    EXPECT_EQ(spec.tokens[j], plain.tokens[j]) << what << " job " << j;
    for (const auto& [pos, row] : plain.logits[j]) {
      auto it = spec.logits[j].find(pos);
      ASSERT_NE(it, spec.logits[j].end()) << what << " position " << pos;
      EXPECT_EQ(it->second, row) << what << " job " << j << " position " << pos << ": logits differ";
    }
  }
}

// Greedy decoding with DSpark drafts: every token and every logit of plain
// decoding, with 1, 3 and 5 drafts per step, on both golden checkpoints.
TEST(DSparkServing, GreedyOutputIsPlainDecodingsWithAnyNumberOfDrafts) {
  for (const char* name : {"dspark-tiny", "dspark-fp8"}) {
    const DeepseekV4& model = golden_model(name, kernels::Numerics::kFast);
    const std::vector<Job> jobs = dspark_jobs();
    auto plain_engine = Engine::create(&model, dspark_options(0));
    ASSERT_TRUE(plain_engine.ok()) << plain_engine.status().message();
    const Outcome plain = run(std::move(*plain_engine), jobs);
    for (int k : {1, 3, 5}) {
      auto engine = Engine::create(&model, dspark_options(k));
      ASSERT_TRUE(engine.ok()) << engine.status().message();
      const Outcome spec = run(std::move(*engine), jobs);
      expect_same(spec, plain, std::string(name) + " k=" + std::to_string(k));
      EXPECT_GT(spec.stats.drafts_proposed, 0);
      std::printf("  %s k=%d: %lld of %lld drafts accepted\n", name, k, static_cast<long long>(spec.stats.drafts_accepted),
                  static_cast<long long>(spec.stats.drafts_proposed));
    }
    // Whole prompts in one step, no prefix cache: the pages hold only each
    // chunk's last window, which is all the rings read.
    auto engine = Engine::create(&model, whole_prompt_options(dspark_options(5)));
    ASSERT_TRUE(engine.ok()) << engine.status().message();
    expect_same(run(std::move(*engine), jobs), plain, std::string(name) + " whole prompts");
  }
  // More drafts than the block proposes, or a checkpoint without the drafter.
  EXPECT_FALSE(Engine::create(&golden_model("dspark-tiny", kernels::Numerics::kFast), dspark_options(6)).ok());
  EXPECT_FALSE(Engine::create(&golden_model("tiny-a"), dspark_options(2)).ok());
}

// Ranks as threads (TP2 x DP2, experts over all four): the same tokens and
// the same drafts as one rank.
TEST(DSparkServing, RanksAsThreadsGiveTheSameTokens) {
  const std::string dir = golden_dir() + "/dspark-tiny";
  const DeepseekV4& model = golden_model("dspark-tiny", kernels::Numerics::kFast);
  const std::vector<Job> jobs = dspark_jobs();
  auto plain_engine = Engine::create(&model, dspark_options(0));
  ASSERT_TRUE(plain_engine.ok());
  const Outcome plain = run(std::move(*plain_engine), jobs);
  auto single_engine = Engine::create(&model, dspark_options(3));
  ASSERT_TRUE(single_engine.ok());
  const Outcome single = run(std::move(*single_engine), jobs);
  ParallelOptions p;
  p.topology.tp = 2;
  p.topology.dp = 2;
  EngineOptions o = dspark_options(3);
  auto cache = Engine::cache_options(model.config(), o);
  ASSERT_TRUE(cache.ok());
  ModelOptions mo;
  mo.numerics = kernels::Numerics::kFast;
  auto executor = LocalExecutor::create(dir, mo, p, *cache);
  ASSERT_TRUE(executor.ok()) << executor.status().message();
  auto engine = Engine::create(std::move(*executor), o.scheduler);
  ASSERT_TRUE(engine.ok()) << engine.status().message();
  const Outcome spec = run(std::move(*engine), jobs);
  for (size_t j = 0; j < jobs.size(); ++j) {
    EXPECT_EQ(spec.tokens[j], plain.tokens[j]) << "job " << j;
    // The drafter shards like the trunk (its stages' heads and experts,
    // the vocabulary of the embedding and head): the same drafts.
    EXPECT_EQ(spec.drafts[j], single.drafts[j]) << "job " << j << ": drafts on TP2 x DP2 differ from one rank's";
  }
  EXPECT_GT(spec.stats.drafts_proposed, 0);
}

}  // namespace
}  // namespace dsv4

namespace dsv4 {
namespace {

// The drafts the engine makes while serving are the reference's: the golden
// prompts served greedily with 5 drafts per step (prefill in 96-token
// chunks, so the rings fill across steps). Wherever a step ends at the
// position of a golden draft call (always the first, after the prompt; later
// ones while every draft is rejected and decoding follows the golden
// teacher-forced path), the engine's drafts are the golden draft_ids.
TEST(DSparkServing, ServedDraftsAreTheReferenceDraftCalls) {
  for (const char* name : {"dspark-tiny", "dspark-fp8"}) {
    const DeepseekV4& model = golden_model(name, kernels::Numerics::kExact);
    auto golden = SafetensorsFile::open(golden_dir() + "/" + name + "/golden.safetensors");
    ASSERT_TRUE(golden.ok());
    auto ints = [&](const char* t) {
      const TensorInfo* info = (*golden)->find(t);
      std::vector<int64_t> v(info->numel());
      std::memcpy(v.data(), info->data, info->nbytes);
      return std::make_pair(v, info->shape);
    };
    // Plain variables, not structured bindings: lambdas capture them (C++20
    // clang does not capture bindings).
    const auto prompt_t = ints("prompt_ids"), draft_t = ints("draft_ids"), start_t = ints("draft_start_pos");
    const std::vector<int64_t>& prompt = prompt_t.first;
    const std::vector<int64_t>& draft_ids = draft_t.first;
    const std::vector<int64_t>& start_pos = start_t.first;
    const int64_t B = prompt_t.second[0], S = prompt_t.second[1], N = draft_t.second[0], K = draft_t.second[2] - 1;
    const TensorInfo* conf_t = (*golden)->find("draft_confidence");
    ASSERT_NE(conf_t, nullptr);
    std::vector<float> confidence(conf_t->numel());
    std::memcpy(confidence.data(), conf_t->data, conf_t->nbytes);
    // Threshold 0 verifies every draft; 0.5 up to the first whose
    // sigmoid(confidence) is below one half.
    for (float threshold : {0.0f, 0.5f}) {
    EngineOptions options = dspark_options(5);
    options.scheduler.confidence_threshold = threshold;
    auto engine = Engine::create(&model, options);
    ASSERT_TRUE(engine.ok());
    std::map<int64_t, int64_t> batch_of;
    int compared = 0, shortened = 0;
    (*engine)->set_draft_observer([&](int64_t id, int64_t position, const std::vector<int32_t>& drafts) {
      const int64_t b = batch_of.at(id);
      for (int64_t n = 0; n < N; ++n) {
        if (start_pos[n] != position) continue;
        int64_t confident = 0;
        while (confident < K && 1.0 / (1.0 + std::exp(-confidence[(n * B + b) * K + confident])) >= threshold) ++confident;
        ASSERT_EQ(static_cast<int64_t>(drafts.size()), confident) << name << " threshold " << threshold;
        shortened += confident < K;
        std::vector<int32_t> want(drafts.size());
        for (size_t k = 0; k < want.size(); ++k) want[k] = static_cast<int32_t>(draft_ids[(n * B + b) * (K + 1) + k + 1]);
        EXPECT_EQ(drafts, want) << name << " sequence " << b << " draft call " << n;
        ++compared;
      }
    });
    for (int64_t b = 0; b < B; ++b) {
      SamplingParams p = testing::greedy(N + K + 4);  // room for K drafts at every golden call
      p.ignore_eos = true;
      auto id = (*engine)->add_request(std::vector<int32_t>(prompt.begin() + b * S, prompt.begin() + (b + 1) * S), p);
      ASSERT_TRUE(id.ok());
      batch_of[*id] = b;
    }
    while ((*engine)->has_unfinished()) (*engine)->step();
    EXPECT_GE(compared, 2 * B) << name << ": the first draft calls after each prompt, and later ones";
    if (threshold > 0.0f) {
      EXPECT_GT(shortened, 0) << name << ": the threshold never cut a run short";
    }
    const EngineStats& st = (*engine)->stats();
    int64_t proposed = 0, accepted = 0;
    for (int k = 0; k < kMaxDraftTokens; ++k) proposed += st.proposed_at[k], accepted += st.accepted_at[k];
    EXPECT_EQ(proposed, st.drafts_proposed);
    EXPECT_EQ(accepted, st.drafts_accepted);
    for (int k = 1; k < kMaxDraftTokens; ++k) EXPECT_LE(st.proposed_at[k], st.proposed_at[k - 1]);
    }
  }
}

}  // namespace
}  // namespace dsv4

namespace dsv4 {
namespace {

// A prefix-cache hit skips the cached prompt rows; their ring rows come
// with the cached blocks (the rings are window rows of the stages' cache
// layers), so the same prompts served again by the same engine give plain
// decoding's tokens and the cold run's drafts at every position.
TEST(DSparkServing, PrefixCacheHitsRestoreTheRings) {
  const DeepseekV4& model = golden_model("dspark-tiny", kernels::Numerics::kFast);
  std::vector<Job> jobs = dspark_jobs();
  jobs.erase(jobs.begin());  // prompts of a whole 128-token block or more
  jobs.erase(jobs.begin());
  auto plain_engine = Engine::create(&model, dspark_options(0));
  ASSERT_TRUE(plain_engine.ok());
  const Outcome plain = run(std::move(*plain_engine), jobs);
  auto engine = Engine::create(&model, dspark_options(3));
  ASSERT_TRUE(engine.ok());
  Engine* e = engine->get();
  std::map<int64_t, size_t> job_of;
  std::vector<std::map<int64_t, std::vector<int32_t>>> drafts[2];  // [pass][job]: position -> drafts
  int pass = 0;
  e->set_draft_observer([&](int64_t id, int64_t position, const std::vector<int32_t>& d) {
    drafts[pass][job_of.at(id)][position] = d;
  });
  for (pass = 0; pass < 2; ++pass) {
    drafts[pass].resize(jobs.size());
    const int64_t hits_before = e->stats().prefix_hit_tokens;
    std::vector<std::vector<int32_t>> tokens(jobs.size());
    for (size_t j = 0; j < jobs.size(); ++j) job_of[*e->add_request(jobs[j].prompt, jobs[j].params)] = j;
    while (e->has_unfinished())
      for (const RequestOutput& o : e->step())
        tokens[job_of.at(o.id)].insert(tokens[job_of.at(o.id)].end(), o.new_tokens.begin(), o.new_tokens.end());
    for (size_t j = 0; j < jobs.size(); ++j) EXPECT_EQ(tokens[j], plain.tokens[j]) << "pass " << pass << " job " << j;
    if (pass == 1) {
      EXPECT_GT(e->stats().prefix_hit_tokens, hits_before) << "the second pass hits the cache";
    }
  }
  for (size_t j = 0; j < jobs.size(); ++j) {
    ASSERT_FALSE(drafts[1][j].empty());
    EXPECT_EQ(drafts[1][j], drafts[0][j]) << "job " << j << ": drafts after a prefix hit differ from the cold run's";
  }
}


// A request that finishes without choosing a token (max_tokens 0: only
// the prompt's scores) still gives its rows to the drafter, without a row
// for the token it never chose; speculating engines (DSpark and MTP) serve
// it beside others: it gets its scores and no drafts, and the decoding
// request beside it gets the tokens and the drafts it gets alone.
TEST(DSparkServing, PromptOnlyRequestsBesideSpeculation) {
  for (const char* name : {"dspark-tiny", "tiny-a"}) {
    const DeepseekV4& model = golden_model(name, kernels::Numerics::kFast);
    auto make = [&] {
      EngineOptions o = dspark_options(2);
      if (std::string(name) == "tiny-a") o.scheduler.drafter = SchedulerOptions::Drafter::kMtp;
      auto engine = Engine::create(&model, o);
      EXPECT_TRUE(engine.ok()) << engine.status().message();
      return std::move(*engine);
    };
    SamplingParams score = testing::greedy(0);
    score.prompt_logprobs = 0;
    const Job decoding = {{11, 12, 13}, testing::greedy(6)};
    std::vector<Job> jobs = {{{5, 6, 7, 8, 9, 10}, score}, decoding, {{3, 4}, score}};
    const Outcome out = run(make(), jobs);
    const Outcome alone = run(make(), {decoding});
    EXPECT_TRUE(out.tokens[0].empty()) << name;
    EXPECT_TRUE(out.tokens[2].empty()) << name;
    EXPECT_EQ(out.prompt_scores[0], 5u) << name << ": every prompt position but the first is scored";
    EXPECT_EQ(out.prompt_scores[2], 1u) << name;
    EXPECT_TRUE(out.drafts[0].empty() && out.drafts[2].empty()) << name << ": a request that never decodes drafts";
    EXPECT_EQ(out.tokens[1].size(), 6u) << name;
    EXPECT_EQ(out.tokens[1], alone.tokens[0]) << name;
    ASSERT_FALSE(alone.drafts[0].empty()) << name << ": the decoding request speculates";
    EXPECT_EQ(out.drafts[1], alone.drafts[0]) << name << ": the prompt-only rows moved the drafter's";
    EXPECT_GT(out.stats.drafts_proposed, 0) << name;
  }
}

// The rings are a cache family of their own (dspark_ring): the stages'
// window rows, block_size positions a page, reserved in the budget beside
// ori's, held while a request runs and released behind the window and when
// it ends.
TEST(DSparkServing, TheRingsAreACacheFamilyOfTheirOwn) {
  const DeepseekV4& model = golden_model("dspark-tiny", kernels::Numerics::kFast);
  const ModelConfig& c = model.config();
  auto engine = Engine::create(&model, whole_prompt_options(dspark_options(3)));
  ASSERT_TRUE(engine.ok());
  Engine* e = engine->get();
  KvCacheManager& kv = e->cache(0);
  const PageLayout& layout = kv.layout();
  const int64_t row = layout.geometry.kv_row.bytes(), bs = layout.block_size;
  EXPECT_EQ(layout.family(CacheFamily::kDSparkRing).page_bytes, c.dspark_stages * bs * row);
  EXPECT_EQ(layout.family(CacheFamily::kOri).page_bytes, c.n_layers * bs * row) << "ori keeps the model's layers only";
  const PagePool& ring = kv.pool(CacheFamily::kDSparkRing);
  EXPECT_EQ(ring.num_pages(), kv.pool(CacheFamily::kOri).num_pages());
  std::vector<int32_t> prompt(250);
  for (size_t t = 0; t < prompt.size(); ++t) prompt[t] = static_cast<int32_t>((t * 13 + 1) % 1000);
  SamplingParams p = testing::greedy(40);
  p.ignore_eos = true;
  ASSERT_TRUE(e->add_request(prompt, p).ok());
  int64_t most = 0;
  while (e->has_unfinished()) {
    e->step();
    const int64_t held = ring.num_pages() - ring.free_pages();
    most = std::max(most, held);
    if (e->has_unfinished()) {
      EXPECT_GT(held, 0);
      EXPECT_LE(held, (c.window_size + bs - 1) / bs + 2) << "pages behind the window are released";
    }
  }
  EXPECT_GT(most, 0);
  EXPECT_EQ(ring.free_pages(), ring.num_pages()) << "every ring page is back once the request ends";
}

// The step that finishes a request may complete a 128-token block; the
// drafter still takes that step's rows before the pages go to the prefix
// cache, so a later prompt extending the finished one drafts as on a
// fresh engine (the hit's recomputed rows are not written again).
TEST(DSparkServing, TheFinishingStepsRingRowsReachThePrefixCache) {
  const DeepseekV4& model = golden_model("dspark-tiny", kernels::Numerics::kFast);
  std::vector<int32_t> prompt(250);
  for (size_t t = 0; t < prompt.size(); ++t) prompt[t] = static_cast<int32_t>((t * 37 + 5) % 1000);
  auto warm_engine = Engine::create(&model, dspark_options(3));
  ASSERT_TRUE(warm_engine.ok());
  Engine* e = warm_engine->get();
  // 7 tokens: the step that finishes computes position 255, the end of
  // block 1.
  SamplingParams p = testing::greedy(7);
  p.ignore_eos = true;
  ASSERT_TRUE(e->add_request(prompt, p).ok());
  std::vector<int32_t> longer = prompt;
  while (e->has_unfinished())
    for (const RequestOutput& o : e->step()) longer.insert(longer.end(), o.new_tokens.begin(), o.new_tokens.end());
  ASSERT_EQ(longer.size(), prompt.size() + 7);
  for (int t = 0; t < 20; ++t) longer.push_back(static_cast<int32_t>((t * 11 + 3) % 1000));
  // The longer prompt on the same engine (a hit on blocks 0 and 1) and on a
  // fresh one: the same drafts.
  std::map<int64_t, std::vector<int32_t>> warm_drafts;  // position -> drafts
  int64_t longer_id = -1;
  e->set_draft_observer([&](int64_t id, int64_t position, const std::vector<int32_t>& d) {
    if (id == longer_id) warm_drafts[position] = d;
  });
  p.max_tokens = 12;
  longer_id = *e->add_request(longer, p);
  while (e->has_unfinished()) e->step();
  EXPECT_GE(e->stats().prefix_hit_tokens, 256 - 4) << "blocks 0 and 1 (less the replayed rows) come from the cache";
  auto cold_engine = Engine::create(&model, dspark_options(3));
  ASSERT_TRUE(cold_engine.ok());
  const Outcome cold = run(std::move(*cold_engine), {{longer, p}});
  ASSERT_FALSE(warm_drafts.empty());
  EXPECT_EQ(warm_drafts, cold.drafts[0]);
}

}  // namespace
}  // namespace dsv4

namespace dsv4 {
namespace {

// Sampled output keeps its distribution: the first three sampled tokens of
// 1500 seeded requests with and without DSpark drafts (k = 3) are two
// samples of one distribution: a two-sample chi-square test over the
// outcomes (rare ones pooled) at the 0.001 level, as the MTP path's test.
// The drafter samples its chain at the request's temperature; the target
// keeps draft k with probability min(1, p/q) and otherwise draws from the
// residual. Returns the share of drafts accepted.
double expect_sampled_distribution_kept(const DeepseekV4& model, const std::string& what) {
  const int n = 1500;
  std::vector<Job> jobs;
  for (int i = 0; i < n; ++i) {
    SamplingParams p;
    p.temperature = 1.0f;
    p.top_k = 3;
    p.max_tokens = 3;
    p.ignore_eos = true;
    p.seed = 1000 + i;
    jobs.push_back({{5, 77, 300, 12, 9}, p});
  }
  auto plain_engine = Engine::create(&model, dspark_options(0));
  auto spec_engine = Engine::create(&model, dspark_options(3));
  EXPECT_TRUE(plain_engine.ok() && spec_engine.ok());
  const Outcome plain = run(std::move(*plain_engine), jobs), spec = run(std::move(*spec_engine), jobs);
  EXPECT_GT(spec.stats.drafts_proposed, 0);
  std::map<std::vector<int32_t>, std::pair<int, int>> counts;
  for (int i = 0; i < n; ++i) {
    ++counts[plain.tokens[i]].first;
    ++counts[spec.tokens[i]].second;
  }
  const testing::ChiSquare chi = testing::two_sample_chi_square(counts);
  EXPECT_GE(chi.cells, 5u) << what << ": too few outcomes for the test to mean anything";
  EXPECT_LT(chi.statistic, chi.critical) << what << ": " << chi.cells << " cells";
  std::printf("  %s: chi-square %.1f over %zu cells (critical %.1f); %lld of %lld drafts accepted\n", what.c_str(),
              chi.statistic, chi.cells, chi.critical, static_cast<long long>(spec.stats.drafts_accepted),
              static_cast<long long>(spec.stats.drafts_proposed));
  return static_cast<double>(spec.stats.drafts_accepted) / std::max<int64_t>(1, spec.stats.drafts_proposed);
}

// The golden checkpoint's drafter is random: it is almost never accepted.
TEST(DSparkServing, SampledOutputKeepsItsDistribution) {
  expect_sampled_distribution_kept(golden_model("dspark-tiny", kernels::Numerics::kFast), "dspark-tiny");
}

// A drafter that agrees (mkmodel --dspark-drafts-agree): greedy decoding
// accepts every draft the request has room for, and sampled decoding keeps
// its distribution while most drafts are accepted (the p/q rule and the
// residual both at work).
TEST(DSparkServing, AnAgreeingDrafterIsAcceptedAndKeepsTheDistribution) {
  testing::TempDir dir("dsv4_test_dspark_agrees");
  SyntheticOptions opt;
  opt.dspark_drafts_agree = true;
  auto model = testing::synthetic_dspark_model(dir.path(), opt);
  ASSERT_TRUE(model.ok()) << model.status().message();
  const ModelConfig* config = &(*model)->config();

  std::vector<Job> jobs = dspark_jobs();
  for (Job& j : jobs)
    for (int32_t& t : j.prompt) t %= config->vocab_size;
  auto plain_engine = Engine::create(model->get(), dspark_options(0));
  auto spec_engine = Engine::create(model->get(), dspark_options(5));
  auto whole_engine = Engine::create(model->get(), whole_prompt_options(dspark_options(5)));
  ASSERT_TRUE(plain_engine.ok() && spec_engine.ok() && whole_engine.ok());
  const Outcome plain = run(std::move(*plain_engine), jobs), spec = run(std::move(*spec_engine), jobs),
                whole = run(std::move(*whole_engine), jobs);
  EXPECT_EQ(whole.stats.drafts_accepted, whole.stats.drafts_proposed);
  for (size_t j = 0; j < jobs.size(); ++j) {
    EXPECT_EQ(spec.tokens[j], plain.tokens[j]) << "job " << j;
    EXPECT_EQ(whole.tokens[j], plain.tokens[j]) << "whole prompts, job " << j;
    EXPECT_EQ(plain.tokens[j], std::vector<int32_t>(plain.tokens[j].size(), jobs[j].prompt.back()))
        << "the model repeats the prompt's last token";
  }
  EXPECT_EQ(spec.stats.drafts_accepted, spec.stats.drafts_proposed) << "greedy drafts of an agreeing drafter";
  EXPECT_GT(spec.stats.drafts_proposed, 0);
  EXPECT_LT(spec.stats.steps, plain.stats.steps / 2) << "five drafts a step make fewer steps";

  const double accepted = expect_sampled_distribution_kept(**model, "agreeing drafter");
  EXPECT_GT(accepted, 0.3);
  EXPECT_LT(accepted, 0.95) << "rejections too, so the residual draw is exercised";
}

}  // namespace
}  // namespace dsv4

namespace dsv4 {
namespace {

// A sampling request's drafts are verified against softmax(logits / T) of
// the logits the drafter returns (the p/q rule needs the distribution each
// draft was drawn from): the drafter's Gumbel-max draws of its first draft,
// over 3000 calls with their own streams, fit that distribution.
TEST(DSparkServing, SampledDraftsComeFromTheDistributionVerificationUses) {
  const DeepseekV4& model = golden_model("dspark-tiny", kernels::Numerics::kFast);
  const ModelConfig& c = model.config();
  const int64_t width = int64_t{c.dspark_taps()} * c.dim, p = 40, V = c.vocab_size;
  std::mt19937 gen(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> taps((p + 1) * width);
  for (float& v : taps) v = normal(gen);
  ContiguousCache rings(CacheGeometry::of(c), c.dspark_cache_layer(0), c.dspark_stages);
  ASSERT_TRUE(model.dspark_fill(&rings, taps.data(), p, 0).ok());
  for (float temperature : {1.0f, 0.6f}) {
    const int n = 3000;
    std::vector<std::mt19937_64> rngs;
    for (int i = 0; i < n; ++i) rngs.emplace_back(77 + i);
    std::vector<DSparkCall> calls(n);
    for (int i = 0; i < n; ++i) {
      calls[i].cache = &rings;
      calls[i].position = p;
      calls[i].anchor = 17;
      calls[i].tap = &taps[p * width];
      calls[i].temperature = temperature;
      calls[i].rng = &rngs[i];
    }
    std::vector<DSparkDraft> out;
    ASSERT_TRUE(model.dspark_draft(calls, &out).ok());
    std::vector<float> q;
    softmax_at_temperature(out[0].logits.data(), V, temperature, &q);
    std::vector<int> seen(V, 0);
    for (const DSparkDraft& d : out) {
      ASSERT_EQ(std::vector<float>(d.logits.begin(), d.logits.begin() + V),
                std::vector<float>(out[0].logits.begin(), out[0].logits.begin() + V))
          << "the first row's logits do not depend on the draws";
      ++seen[d.ids[1]];
    }
    const testing::ChiSquare chi = testing::chi_square_fit(seen, q, n);
    ASSERT_GE(chi.cells, 5u) << "too few likely drafts for the test to mean anything";
    EXPECT_LT(chi.statistic, chi.critical) << "T " << temperature << ", " << chi.cells << " cells";
    std::printf("  T %.1f: chi-square %.1f over %zu cells (critical %.1f)\n", temperature, chi.statistic, chi.cells,
                chi.critical);
  }
}

// dsv4 mkmodel --dspark: a synthetic DSpark checkpoint (here at the golden
// cases' shapes, FP8 weights) loads with its drafter's three stages in FP8
// and serves greedy DSpark decoding, proposing drafts, with plain
// decoding's tokens.
TEST(DSpark, SyntheticCheckpointLoadsAndServes) {
  testing::TempDir dir("dsv4_test_dspark_synthetic");
  SyntheticOptions opt;
  opt.weights = SyntheticWeights::kFp8;
  auto model = testing::synthetic_dspark_model(dir.path(), opt);
  ASSERT_TRUE(model.ok()) << model.status().message();
  const ModelConfig* config = &(*model)->config();
  ASSERT_TRUE(config->has_dspark());
  EXPECT_EQ(config->dspark_stages, 3);
  EXPECT_EQ(config->n_mtp_layers, 0);
  ASSERT_TRUE((*model)->weights().dspark.has_value());
  EXPECT_EQ((*model)->weights().dspark->main_proj.format, WeightFormat::kFp8Block);
  std::vector<Job> jobs = dspark_jobs();
  for (Job& j : jobs)
    for (int32_t& t : j.prompt) t %= config->vocab_size;
  auto plain_engine = Engine::create(model->get(), dspark_options(0));
  auto spec_engine = Engine::create(model->get(), dspark_options(5));
  ASSERT_TRUE(plain_engine.ok() && spec_engine.ok());
  const Outcome plain = run(std::move(*plain_engine), jobs), spec = run(std::move(*spec_engine), jobs);
  for (size_t j = 0; j < jobs.size(); ++j) EXPECT_EQ(spec.tokens[j], plain.tokens[j]) << "job " << j;
  EXPECT_GT(spec.stats.drafts_proposed, 0);
}

}  // namespace
}  // namespace dsv4
