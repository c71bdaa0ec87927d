// DeepSeek-V4.1's forward against the official reference's goldens
// (tests/golden_v41), bit for bit: every layer's streams, the DSpark taps
// and the logits of the prefill, then the logits of each decode step with
// the sequences batched and the DSpark drafts after it; the prompts whole, in chunks of 1, 7 and 64, and
// packed into one forward.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "checkpoint/config_json.h"
#include "checkpoint/safetensors.h"
#include "golden_v41_case.h"
#include "checkpoint/v41_loader.h"
#include "model/deepseek_v41.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/engram_token_map.h"

namespace dsv4 {
namespace {

// ||got - want|| / ||want||.
double relative_l2(const float* got, const float* want, int64_t n) {
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < n; ++i) {
    diff += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
    norm += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(diff / norm);
}

// The layers' streams of the last forward, by name.
struct LayerTrace : ForwardTrace {
  std::map<std::string, std::vector<float>> tensors;
  void record(const std::string& name, const float* rows, int64_t num_rows, int64_t row_size) override {
    tensors[name].assign(rows, rows + num_rows * row_size);
  }
};

struct Case {
  ModelConfig config;
  std::unique_ptr<DeepseekV41> model;
  std::unique_ptr<SafetensorsFile> golden;
};

Case load_case(const std::string& name) {
  Case c;
  auto config = parse_v41_model_config(read_text_file(golden_v41_dir(name) + "/config.json"), name);
  EXPECT_TRUE(config.ok()) << config.status().message();
  if (!config.ok()) return c;
  c.config = *config;
  auto tokenizer = BpeTokenizer::load(golden_v41_dir(name));
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status().message();
  auto map = engram_token_map(**tokenizer, c.config.engram.compressed_vocab_size);
  EXPECT_TRUE(map.ok()) << map.status().message();
  auto weights = load_v41_weights(golden_v41_dir(name), c.config);
  EXPECT_TRUE(weights.ok()) << weights.status().message();
  if (!map.ok() || !weights.ok()) return c;
  c.model = std::make_unique<DeepseekV41>(c.config, std::move(*weights), map->compressed, map->size);
  auto file = SafetensorsFile::open(golden_v41_dir(name) + "/golden.safetensors");
  EXPECT_TRUE(file.ok()) << file.status().message();
  if (file.ok()) c.golden = std::move(*file);
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
  ASSERT_TRUE(c.model && c.golden);
  const SafetensorsFile& g = *c.golden;
  const ModelConfig& cfg = c.config;
  const std::vector<int64_t> ids_shape = g.find("prompt_ids")->shape;
  const int64_t B = ids_shape[0], S = ids_shape[1], V = cfg.vocab_size, flat = cfg.hc_mult * cfg.dim;
  const int64_t taps = cfg.dspark_taps() * cfg.dim;
  const std::vector<int64_t> prompt = read_tensor<int64_t>(g, "prompt_ids");
  std::vector<std::unique_ptr<ContiguousCache>> seqs;
  std::vector<std::vector<int32_t>> seen(B);  // each sequence's tokens so far (Engram's look-back)
  for (int64_t b = 0; b < B; ++b) seqs.push_back(c.model->new_cache());
  auto add = [&](ForwardBatch* batch, int64_t b, const std::vector<int32_t>& tokens, int64_t prefill_len) {
    const int64_t back = std::min<int64_t>(static_cast<int64_t>(seen[b].size()), c.model->history_tokens());
    batch->add(seqs[b].get(), tokens.data(), static_cast<int64_t>(tokens.size()), prefill_len);
    batch->chunks.back().history.assign(seen[b].end() - back, seen[b].end());
    seen[b].insert(seen[b].end(), tokens.begin(), tokens.end());
  };

  // Prefill: the rows of each prompt as they come out of the forwards.
  std::vector<std::vector<std::vector<float>>> layer_rows(B, std::vector<std::vector<float>>(cfg.n_layers));
  std::vector<std::vector<float>> tap_rows(B), last_logits(B);
  const int64_t chunk = split.chunk ? split.chunk : S;
  for (int64_t p0 = 0; p0 < S; p0 += chunk) {
    const int64_t n = std::min(chunk, S - p0);
    std::vector<std::vector<int64_t>> groups;  // which prompts share a forward
    if (split.packed) groups.push_back({0, 1});
    else for (int64_t b = 0; b < B; ++b) groups.push_back({b});
    for (const auto& group : groups) {
      ForwardBatch batch;
      LayerTrace trace;
      batch.trace = &trace;
      batch.want_taps = true;
      for (int64_t b : group) {
        const auto first = prompt.begin() + b * S + p0;
        add(&batch, b, std::vector<int32_t>(first, first + n), S);
      }
      ForwardOutput out;
      ASSERT_TRUE(c.model->forward(batch, &out).ok());
      for (size_t k = 0; k < group.size(); ++k) {
        const int64_t b = group[k], row0 = static_cast<int64_t>(k) * n;
        for (int i = 0; i < cfg.n_layers; ++i) {
          const std::vector<float>& rows = trace.tensors["layer_out." + std::to_string(i)];
          layer_rows[b][i].insert(layer_rows[b][i].end(), rows.begin() + row0 * flat, rows.begin() + (row0 + n) * flat);
        }
        tap_rows[b].insert(tap_rows[b].end(), out.taps.begin() + row0 * taps, out.taps.begin() + (row0 + n) * taps);
        // The prefill's forward_spec only fills the drafter's rings.
        ASSERT_TRUE(c.model->dspark_fill(seqs[b].get(), &out.taps[row0 * taps], n, p0).ok());
        last_logits[b].assign(out.logits.begin() + k * V, out.logits.begin() + (k + 1) * V);
      }
    }
  }
  const std::vector<float> want_logits = read_tensor<float>(g, "prefill_logits");
  const std::vector<float> want_taps = read_tensor<float>(g, "main_hidden");
  for (int64_t b = 0; b < B; ++b) {
    for (int i = 0; i < cfg.n_layers; ++i) {
      const std::vector<float> want = read_tensor<float>(g, "layer_out." + std::to_string(i));
      EXPECT_EQ(relative_l2(layer_rows[b][i].data(), &want[b * S * flat], S * flat), 0.0)
          << "layer_out." << i << " of prompt " << b;
    }
    EXPECT_EQ(relative_l2(tap_rows[b].data(), &want_taps[b * S * taps], S * taps), 0.0) << "main_hidden of prompt " << b;
    EXPECT_EQ(relative_l2(last_logits[b].data(), &want_logits[b * V], V), 0.0) << "prefill_logits of prompt " << b;
  }

  // Decode: the reference's own tokens, both sequences in each step; after
  // each step both draft together from its greedy token and taps.
  const std::vector<int64_t> decode_ids = read_tensor<int64_t>(g, "decode_ids");
  const std::vector<float> decode_logits = read_tensor<float>(g, "decode_logits");
  const std::vector<int64_t> spark_ids = read_tensor<int64_t>(g, "dspark_ids");
  const std::vector<float> spark_logits = read_tensor<float>(g, "dspark_logits");
  const std::vector<float> spark_conf = read_tensor<float>(g, "dspark_confidence");
  const int64_t T = g.find("decode_ids")->shape[0], K = cfg.dspark_block_size;
  for (int64_t t = 0; t < T; ++t) {
    ForwardBatch batch;
    batch.want_taps = true;
    for (int64_t b = 0; b < B; ++b) add(&batch, b, {static_cast<int32_t>(decode_ids[t * B + b])}, S);
    ForwardOutput out;
    ASSERT_TRUE(c.model->forward(batch, &out).ok());
    EXPECT_EQ(relative_l2(out.logits.data(), &decode_logits[t * B * V], B * V), 0.0) << "decode step " << t;
    std::vector<DSparkCall> calls(B);
    for (int64_t b = 0; b < B; ++b) {
      const float* row = &out.logits[b * V];
      calls[b].cache = seqs[b].get();
      calls[b].position = S + t;
      calls[b].anchor = static_cast<int32_t>(std::max_element(row, row + V) - row);
      calls[b].tap = &out.taps[b * taps];
      calls[b].reference_index = b;  // the reference drafts both together
      calls[b].reference_batch = B;
    }
    std::vector<DSparkDraft> drafts;
    ASSERT_TRUE(c.model->dspark_draft(calls, &drafts).ok());
    for (int64_t b = 0; b < B; ++b) {
      const int64_t at = t * B + b;
      for (int64_t j = 0; j <= K; ++j)
        EXPECT_EQ(drafts[b].ids[j], spark_ids[at * (K + 1) + j]) << "dspark_ids step " << t << " seq " << b << " #" << j;
      EXPECT_EQ(relative_l2(drafts[b].logits.data(), &spark_logits[at * K * V], K * V), 0.0)
          << "dspark_logits step " << t << " seq " << b;
      EXPECT_EQ(relative_l2(drafts[b].confidence.data(), &spark_conf[at * K], K), 0.0)
          << "dspark_confidence step " << t << " seq " << b;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, V41Golden,
    ::testing::Combine(::testing::Values("v41-tiny", "v41-fp8"),
                       ::testing::Values(Split{0, false}, Split{1, false}, Split{7, false}, Split{64, false},
                                         Split{0, true}, Split{7, true})),
    [](const auto& info) {
      const Split& s = std::get<1>(info.param);
      return std::string(std::get<0>(info.param) == "v41-tiny" ? "Tiny" : "Fp8") + "_" +
             (s.chunk ? "Chunks" + std::to_string(s.chunk) : std::string("Whole")) + (s.packed ? "_Packed" : "");
    });

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
