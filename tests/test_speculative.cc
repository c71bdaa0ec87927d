// Speculative decoding with the MTP block: greedy output (tokens and every
// logit bit) is the same with 1, 3 or 7 draft tokens as without, on the
// golden checkpoints and on a model whose drafter mostly agrees, also when
// a request stops in the middle of an accepted run and across ranks; the
// first draft after a prompt is the golden mtp_logits' argmax; sampled
// output keeps its distribution.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <vector>

#include "checkpoint/model_loader.h"
#include "checkpoint/safetensors.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/chat_encoding.h"
#include "tools/embedded_model.h"
#include "tools/synthetic.h"
#include "runtime/engine.h"
#include "runtime/local_executor.h"
#include "temp_dir.h"
#include "test_util.h"

namespace dsv4 {
namespace {

using testing::golden_dir;
using testing::golden_model;
using testing::greedy;

struct Job {
  std::vector<int32_t> prompt;
  SamplingParams params;
};

struct Outcome {
  std::vector<std::vector<int32_t>> tokens;               // per job
  std::vector<std::map<int64_t, std::vector<float>>> logits;  // per job: position -> logits
  std::vector<FinishReason> finish;
  EngineStats stats;
};

Outcome serve(std::unique_ptr<Engine> engine, const std::vector<Job>& jobs, bool observe) {
  Outcome out;
  out.tokens.resize(jobs.size());
  out.logits.resize(jobs.size());
  out.finish.resize(jobs.size());
  std::map<int64_t, size_t> job_of;
  if (observe) {
    const int64_t vocab = engine->config().vocab_size;
    engine->set_logits_observer([&, vocab](int64_t id, int64_t pos, const float* logits) {
      out.logits[job_of.at(id)][pos].assign(logits, logits + vocab);
    });
  }
  for (size_t j = 0; j < jobs.size(); ++j) {
    auto id = engine->add_request(jobs[j].prompt, jobs[j].params);
    EXPECT_TRUE(id.ok()) << id.status().message();
    job_of[*id] = j;
  }
  while (engine->has_unfinished()) {
    for (const RequestOutput& o : engine->step()) {
      const size_t j = job_of.at(o.id);
      out.tokens[j].insert(out.tokens[j].end(), o.new_tokens.begin(), o.new_tokens.end());
      if (o.finished) out.finish[j] = o.finish_reason;
    }
  }
  out.stats = engine->stats();
  return out;
}

EngineOptions options(int k) {
  EngineOptions o;
  o.scheduler.max_num_seqs = 8;
  o.scheduler.num_speculative_tokens = k;
  o.cache.memory_bytes = int64_t{256} << 20;
  return o;
}

Outcome serve(const DeepseekV4& model, int k, const std::vector<Job>& jobs, bool observe = true) {
  auto engine = Engine::create(&model, options(k));
  EXPECT_TRUE(engine.ok()) << engine.status().message();
  return serve(std::move(*engine), jobs, observe);
}

void expect_same(const Outcome& spec, const Outcome& plain, const std::string& what) {
  ASSERT_EQ(spec.tokens.size(), plain.tokens.size());
  for (size_t j = 0; j < plain.tokens.size(); ++j) {
    EXPECT_EQ(spec.tokens[j], plain.tokens[j]) << what << " job " << j;
    EXPECT_EQ(spec.finish[j], plain.finish[j]) << what << " job " << j;
    ASSERT_EQ(spec.logits[j].size(), plain.logits[j].size()) << what << " job " << j;
    for (const auto& [pos, row] : plain.logits[j]) {
      auto it = spec.logits[j].find(pos);
      ASSERT_NE(it, spec.logits[j].end()) << what << " position " << pos;
      EXPECT_EQ(0, std::memcmp(it->second.data(), row.data(), sizeof(float) * row.size()))
          << what << " job " << j << " position " << pos << ": logits differ";
    }
  }
}

std::vector<int32_t> golden_ids(const SafetensorsFile& f, const char* name, int64_t row) {
  const TensorInfo* t = f.find(name);
  const int64_t cols = t->shape[1];
  std::vector<int64_t> all(t->numel());
  std::memcpy(all.data(), t->data, 8 * all.size());
  return std::vector<int32_t>(all.begin() + row * cols, all.begin() + (row + 1) * cols);
}

TEST(Speculative, GoldenGreedyIsUnchangedAndTheFirstDraftIsTheMtpArgmax) {
  for (const char* name : {"tiny-a", "small-real", "small-fp8"}) {
    const DeepseekV4& model = golden_model(name);
    auto file = SafetensorsFile::open(golden_dir() + "/" + name + "/golden.safetensors");
    ASSERT_TRUE(file.ok());
    const int64_t rows = (*file)->find("prompt_ids")->shape[0], vocab = model.config().vocab_size;
    std::vector<Job> jobs;
    for (int64_t b = 0; b < rows; ++b) jobs.push_back({golden_ids(**file, "prompt_ids", b), greedy(10)});

    // After the prompt's step the MTP block has seen the prompt shifted by
    // one and the chosen token: its draft is the golden mtp_logits' argmax.
    auto engine = Engine::create(&model, options(3));
    ASSERT_TRUE(engine.ok());
    std::vector<int64_t> ids;
    for (const Job& j : jobs) ids.push_back(*(*engine)->add_request(j.prompt, j.params));
    (*engine)->step();
    const TensorInfo* mtp = (*file)->find("mtp_logits");
    for (int64_t b = 0; b < rows; ++b) {
      const float* l = reinterpret_cast<const float*>(mtp->data) + b * vocab;
      const int32_t best = static_cast<int32_t>(std::max_element(l, l + vocab) - l);
      const Request* r = (*engine)->scheduler().find(ids[b]);
      ASSERT_NE(r, nullptr);
      ASSERT_EQ(r->draft.size(), 3u) << name;
      EXPECT_EQ(r->draft[0], best) << name << " prompt " << b;
    }

    const Outcome plain = serve(model, 0, jobs);
    // Sanitized, one draft length runs the same code as the three.
    for (int k : testing::kSanitized ? std::vector<int>{3} : std::vector<int>{1, 3, 7})
      expect_same(serve(model, k, jobs), plain, std::string(name) + " K=" + std::to_string(k));
  }
}

// A random model of the embedded default's shapes (mkmodel's default
// preset), or the same with an MTP block that copies the last block
// (mkmodel --mtp-copies-last-block): drafts mostly right, so accepted runs
// of several tokens happen.
std::string synthetic_dir(bool copied_mtp) {
  static testing::TempDir copied("dsv4_test_mtp_copy"), plain("dsv4_test_random_default");
  const std::string d = copied_mtp ? copied.path() : plain.path();
  auto config = synthetic_config("default");
  EXPECT_TRUE(config.ok());
  SyntheticOptions o;
  o.mtp_copies_last_block = copied_mtp;
  EXPECT_TRUE(write_synthetic_checkpoint(*config, o, d).ok());
  return d;
}

// The embedded default model, trained (its MTP block too).
const std::string& trained_default_dir() {
  static testing::TempDir dir("dsv4_test_trained_default");
  static const bool written = write_embedded_model("default", dir.path()).ok();
  EXPECT_TRUE(written);
  return dir.path();
}

const std::string& copied_mtp_dir() {
  static const std::string dir = synthetic_dir(true);
  return dir;
}

TEST(Speculative, AcceptedRunsStopWhereTheRequestEndsAndChangeNothing) {
  const std::string dir = copied_mtp_dir();
  auto model = load_deepseek_v4(dir);
  ASSERT_TRUE(model.ok());
  const int64_t vocab = (*model)->config().vocab_size;
  auto prompt = [&](int64_t len, int seed) {
    std::vector<int32_t> t(len);
    for (int64_t i = 0; i < len; ++i) t[i] = static_cast<int32_t>((i * 31 + seed * 97 + 5) % vocab);
    return t;
  };
  // Prompts crossing compressed windows and a 128-token block.
  std::vector<Job> jobs = {{prompt(7, 1), greedy(40)}, {prompt(150, 2), greedy(33)}, {prompt(61, 3), greedy(25)}};
  const Outcome first = serve(**model, 0, jobs);
  // Stop on a token in the middle of job 1's output (its first occurrence),
  // and let EOS end job 2 at a token it produces.
  const int32_t stop = first.tokens[1][17];
  jobs[1].params.stop_token_ids = {stop};
  jobs[2].params.ignore_eos = false;
  const Outcome plain = serve(**model, 0, jobs);
  ASSERT_EQ(plain.finish[1], FinishReason::kStop);
  ASSERT_LE(plain.tokens[1].size(), 18u);
  for (int k : {1, 3, 7}) {
    const Outcome spec = serve(**model, k, jobs);
    expect_same(spec, plain, "K=" + std::to_string(k));
    // The drafter agrees often: several tokens per step.
    EXPECT_GT(spec.stats.drafts_accepted, spec.stats.drafts_proposed / 4) << "K=" << k;
    EXPECT_LT(spec.stats.steps, plain.stats.steps) << "K=" << k;
  }
}

TEST(Speculative, RanksAsThreadsGiveTheSameTokens) {
  const std::string dir = copied_mtp_dir();
  auto model = load_deepseek_v4(dir);
  ASSERT_TRUE(model.ok());
  std::vector<Job> jobs;
  for (int i = 0; i < 4; ++i) {
    std::vector<int32_t> p(20 + 37 * i);
    for (size_t t = 0; t < p.size(); ++t) p[t] = static_cast<int32_t>((t * 13 + i * 7 + 1) % 512);
    jobs.push_back({p, greedy(12 + 5 * i)});
  }
  const Outcome plain = serve(**model, 0, jobs, false);
  ParallelOptions p;
  p.topology.tp = 2;
  p.topology.dp = 2;
  EngineOptions o = options(3);
  auto cache = Engine::cache_options((*model)->config(), o);
  ASSERT_TRUE(cache.ok());
  auto executor = LocalExecutor::create(dir, {}, p, *cache);
  ASSERT_TRUE(executor.ok()) << executor.status().message();
  auto engine = Engine::create(std::move(*executor), o.scheduler);
  ASSERT_TRUE(engine.ok());
  const Outcome spec = serve(std::move(*engine), jobs, false);
  for (size_t j = 0; j < jobs.size(); ++j) EXPECT_EQ(spec.tokens[j], plain.tokens[j]) << "job " << j;
  EXPECT_GT(spec.stats.drafts_accepted, 0);
}

// With a fixed seed per request, the first three sampled tokens of 1500
// requests with K = 3 and without speculation are two samples of the same
// distribution if rejection sampling is right: a two-sample chi-square test
// over the outcomes (rare ones pooled so every cell expects >= 10) must not
// reject at the 0.001 level, on a random model (its random MTP block
// drafts tokens the target often rejects), on one whose MTP block copies
// the last block, and on the trained default model asked a question in
// its chat encoding (its trained MTP block's drafts mostly kept). The
// seeds are fixed, so the test is deterministic; a wrong acceptance rule
// (keeping every draft, or drawing the replacement from p including the
// draft) gives a chi-square of 700 to 1250 against a bound of about 54.
enum class Drafter { kRandom, kCopiedMtp, kTrained };

class SpeculativeSampling : public ::testing::TestWithParam<Drafter> {};

TEST_P(SpeculativeSampling, OutputKeepsItsDistribution) {
  const Drafter drafter = GetParam();
  const std::string dir = drafter == Drafter::kTrained     ? trained_default_dir()
                          : drafter == Drafter::kCopiedMtp ? copied_mtp_dir()
                                                           : synthetic_dir(false);
  auto model = load_deepseek_v4(dir);
  ASSERT_TRUE(model.ok());
  std::vector<int32_t> prompt = {5, 77, 300, 12, 9};
  if (drafter == Drafter::kTrained) {
    auto tokenizer = BpeTokenizer::load(dir);
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().message();
    // Its reply begun ("17 + 25 = 4"): the digits after, which it is
    // unsure of, spread the outcomes over enough cells.
    auto text = encode_chat(nlohmann::ordered_json::array({{{"role", "user"}, {"content", "What is 17 + 25?"}}}),
                            ChatOptions{});
    ASSERT_TRUE(text.ok());
    prompt = (*tokenizer)->encode(*text + "17 + 25 = 4");
  }
  const int n = 1500;
  std::vector<Job> jobs;
  for (int i = 0; i < n; ++i) {
    SamplingParams p;
    p.temperature = drafter == Drafter::kTrained ? 1.0f : 1.5f;
    p.top_k = 3;
    p.max_tokens = 3;
    p.ignore_eos = true;
    p.seed = 1000 + i;
    jobs.push_back({prompt, p});
  }
  const Outcome plain = serve(**model, 0, jobs, false), spec = serve(**model, 3, jobs, false);
  EXPECT_GT(spec.stats.drafts_proposed, 0);
  EXPECT_LT(spec.stats.drafts_accepted, spec.stats.drafts_proposed);
  // The copied drafter gets drafts kept and rejected, the trained one
  // mostly kept; the random one almost never drafts a token the target
  // would sample.
  if (drafter == Drafter::kCopiedMtp) {
    EXPECT_GT(spec.stats.drafts_accepted, 0);
  }
  if (drafter == Drafter::kTrained) {
    EXPECT_GT(2 * spec.stats.drafts_accepted, spec.stats.drafts_proposed)
        << spec.stats.drafts_accepted << " of " << spec.stats.drafts_proposed << " drafts accepted";
  }
  std::map<std::vector<int32_t>, std::pair<int, int>> counts;
  for (int i = 0; i < n; ++i) {
    ++counts[plain.tokens[i]].first;
    ++counts[spec.tokens[i]].second;
  }
  const testing::ChiSquare chi = testing::two_sample_chi_square(counts);
  ASSERT_GE(chi.cells, 5u) << "too few outcomes for the test to mean anything";
  EXPECT_LT(chi.statistic, chi.critical) << chi.cells << " cells";
}

INSTANTIATE_TEST_SUITE_P(Models, SpeculativeSampling,
                         ::testing::Values(Drafter::kRandom, Drafter::kCopiedMtp, Drafter::kTrained),
                         [](const auto& info) {
                           switch (info.param) {
                             case Drafter::kRandom: return "random_default";
                             case Drafter::kCopiedMtp: return "copied_mtp";
                             case Drafter::kTrained: return "trained_default";
                           }
                           return "";
                         });

TEST(Speculative, ConfigIsChecked) {
  const DeepseekV4& model = golden_model("tiny-a");
  EngineOptions o = options(8);
  auto e = Engine::create(&model, o);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("num_speculative_tokens"), std::string::npos);
  const auto r = testing::run_dsv4("run --prompt hi --speculative-config '{\"method\":\"eagle\",\"num_speculative_tokens\":2}'");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("method must be \"mtp\""), std::string::npos) << r.output;
  const auto r2 = testing::run_dsv4("run --prompt hi --speculative-config 'not json'");
  EXPECT_EQ(r2.code, 2);
  EXPECT_NE(r2.output.find("--speculative-config needs a JSON object"), std::string::npos) << r2.output;
}

}  // namespace
}  // namespace dsv4
