#include "tools/synthetic_v41.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>

#include "checkpoint/config_json.h"
#include "checkpoint/released_configs.h"
#include "model/engram_hash.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/chat_encoding.h"
#include "tokenizer/engram_token_map.h"
#include "tools/synthetic_output.h"

namespace dsv4 {
namespace {

using nlohmann::json;

bool contains(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// ---- the tokenizer ----

const char* kWords =
    "the of and to in is that it for on with as was he be at by this had not are but from or have an they which "
    "one you were all we her she there would their will when who him been has more if no out so said what up its "
    "about into than them can only other new some could time these two may then do first any my now such like our "
    "over man me even most made after also did many before must through back years where much your way well down "
    "should because each just those people how hello who are what is plus minus";
// Spellings Engram's map folds onto others: accents, full width, ligatures,
// whitespace runs.
const char* kFolded[] = {"café", "cafe", "naïve", "naive", "résumé", "resume", "über", "ＴＨＥ", "ｔｈｅ",
                         "ﬁle",  "file", "  ",    "   ",   "\n",     "\n\n",   " \n",   "\t",   "\r\n"};
// Special tokens: the first three at ids 0-2, the chat's at the end before
// the reserved ones.
const char* kLeadingSpecials[] = {chat_tokens::kBos, chat_tokens::kEos, "<｜▁pad▁｜>"};
const char* kChatSpecials[] = {chat_tokens::kUser, chat_tokens::kAssistant, chat_tokens::kSystem,
                               chat_tokens::kThink, chat_tokens::kEndThink, chat_tokens::kLatestReminder};
constexpr int kTrailingSpecials = 16;  // the chat's and reserved ones

std::string byte_level(const std::string& text) {
  std::string out;
  for (unsigned char b : text) out += byte_level_char(b);
  return out;
}

// The byte-level characters of a byte-level string, one per byte.
std::vector<std::string> symbols(const std::string& bl) {
  std::vector<std::string> out;
  for (size_t i = 0; i < bl.size();) {
    const unsigned char c = bl[i];
    const size_t n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    out.push_back(bl.substr(i, n));
    i += n;
  }
  return out;
}

}  // namespace

std::string synthetic_v41_tokenizer_json(int vocab) {
  std::vector<std::string> tokens(std::begin(kLeadingSpecials), std::end(kLeadingSpecials));
  std::set<std::string> seen(tokens.begin(), tokens.end());
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(byte_level_char(static_cast<uint8_t>(b)));
    seen.insert(tokens.back());
  }
  const size_t regular = static_cast<size_t>(vocab - kTrailingSpecials);
  json merges = json::array();
  // Every prefix of a piece becomes a token, so each merge joins a token
  // already present and one byte.
  auto add = [&](const std::string& text) {
    const std::vector<std::string> sym = symbols(byte_level(text));
    std::string prefix = sym[0];
    for (size_t end = 1; end < sym.size() && tokens.size() < regular; ++end) {
      const std::string token = prefix + sym[end];
      if (seen.insert(token).second) {
        merges.push_back(prefix + " " + sym[end]);
        tokens.push_back(token);
      }
      prefix = token;
    }
  };
  for (const char* w : kFolded) add(w), add(std::string(" ") + w);
  std::vector<std::string> words;
  for (size_t i = 0, j; i < std::strlen(kWords); i = j + 1) {
    j = std::string(kWords).find(' ', i);
    if (j == std::string::npos) j = std::strlen(kWords);
    words.push_back(std::string(kWords).substr(i, j - i));
  }
  for (const std::string& w : words) {
    std::string cap = w, upper = w;
    cap[0] = static_cast<char>(std::toupper(cap[0]));
    for (char& c : upper) c = static_cast<char>(std::toupper(c));
    for (const std::string& v : {w, " " + w, cap, " " + cap, upper}) add(v);
  }
  // Then letter strings of growing length, with and without a leading
  // space, until the vocabulary is full.
  for (int len = 2; tokens.size() < regular && len <= 6; ++len) {
    std::string s(len, 'a');
    while (tokens.size() < regular) {
      add(s);
      add(" " + s);
      int k = len - 1;
      while (k >= 0 && s[k] == 'z') s[k--] = 'a';
      if (k < 0) break;
      ++s[k];
    }
  }
  for (const char* s : kChatSpecials) tokens.push_back(s);
  while (static_cast<int>(tokens.size()) < vocab) tokens.push_back("<｜reserved_" + std::to_string(tokens.size()) + "｜>");
  const size_t first_trailing = static_cast<size_t>(vocab - kTrailingSpecials);
  json added = json::array(), map = json::object();
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i < std::size(kLeadingSpecials) || i >= first_trailing) {
      added.push_back({{"id", i}, {"content", tokens[i]}, {"single_word", false}, {"lstrip", false},
                       {"rstrip", false}, {"normalized", false}, {"special", true}});
    } else {
      map[tokens[i]] = i;
    }
  }
  json t = {{"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr}, {"added_tokens", added},
            {"normalizer", nullptr},
            {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
            {"post_processor", nullptr},
            {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
            {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
                       {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false},
                       {"vocab", map}, {"merges", merges}}}};
  return t.dump(1);
}

namespace {

// ---- the config ----

// The released layers in the order a shrunk model keeps them (see
// synthetic_v41_config).
std::vector<int> layers_by_need(const ModelConfig& c) {
  std::vector<int> order;
  auto push = [&](int l) {
    if (l >= 0 && l < c.n_layers && !contains(order, l)) order.push_back(l);
  };
  const SharedSources& s = c.shared;
  std::vector<int> first_sources;
  for (int l : s.kv_source_layers) {
    bool first = true;
    for (int f : first_sources) first &= c.compress_ratios[f] != c.compress_ratios[l];
    if (first) first_sources.push_back(l), push(l);
  }
  push(s.candidate_source_layer);
  for (int l : c.engram.layer_ids) push(l);
  for (int f : first_sources)
    if (f + 1 < c.n_layers && c.compress_ratios[f + 1] == c.compress_ratios[f] && !contains(s.kv_source_layers, f + 1))
      push(f + 1);
  for (int l : s.index_source_layers)
    if (!contains(s.kv_source_layers, l)) {
      push(l);
      break;
    }
  for (int l = 0; l < c.n_layers; ++l) push(l);
  return order;
}

// The entries of `ids` that are kept, renumbered.
json renumbered(const std::vector<int>& ids, const std::vector<int>& kept) {
  json out = json::array();
  for (int l : ids) {
    auto it = std::find(kept.begin(), kept.end(), l);
    if (it != kept.end()) out.push_back(static_cast<int>(it - kept.begin()));
  }
  return out;
}

Status keep_layers(json& t, const ModelConfig& c, int n) {
  if (n > c.n_layers) return invalid_argument("--layers can only shrink the preset's " + std::to_string(c.n_layers) + " layers");
  std::vector<int> kept = layers_by_need(c);
  kept.resize(n);
  std::sort(kept.begin(), kept.end());
  json ratios = json::array();
  for (int l : kept) ratios.push_back(c.compress_ratios[l]);
  for (size_t i = c.n_layers; i < c.compress_ratios.size(); ++i) ratios.push_back(c.compress_ratios[i]);
  t["num_hidden_layers"] = n;
  t["compress_ratios"] = ratios;
  t["kv_source_layer_ids"] = renumbered(c.shared.kv_source_layers, kept);
  t["index_source_layer_ids"] = renumbered(c.shared.index_source_layers, kept);
  const json candidate = renumbered({c.shared.candidate_source_layer}, kept);
  if (candidate.empty()) {
    for (const char* k : {"candidate_source_layer_id", "candidate_topk_blocks", "candidate_block_size"}) t.erase(k);
  } else {
    t["candidate_source_layer_id"] = candidate[0];
  }
  json engram = json::array(), rows = json::array();
  for (size_t i = 0; i < c.engram.layer_ids.size(); ++i) {
    auto it = std::find(kept.begin(), kept.end(), c.engram.layer_ids[i]);
    if (it == kept.end()) continue;
    engram.push_back(static_cast<int>(it - kept.begin()));
    rows.push_back(c.engram.num_embeddings[i]);
  }
  t["engram_layer_ids"] = engram;
  t["engram_num_embeddings"] = rows;
  json taps = json::array();
  for (int l = std::max(0, n - 3); l < n; ++l) taps.push_back(l);
  t["dspark_target_layer_ids"] = taps;
  return Status::Ok();
}

// ---- the weights ----

constexpr int kBf16 = 0, kFp8 = 1, kFp4 = 2, kFp8Rows = 3;  // ShardedOutput::linear kinds

void write_expert(ShardedOutput& out, const std::string& p, int64_t dim, int64_t inter, int kind) {
  out.linear(p + "w1", inter, dim, kind);
  out.linear(p + "w2", dim, inter, kind);
  out.linear(p + "w3", inter, dim, kind);
}

// Block `layer` below prefix p (layers.N. or, for a DSpark stage, mtp.S.),
// as load_v41_weights reads it.
void write_block(ShardedOutput& out, const ModelConfig& c, int layer, const std::string& p) {
  const int64_t dim = c.dim, hd = c.head_dim, H = c.n_heads, G = c.o_groups;
  auto norm = [&](const std::string& name, int64_t n) { out.bf16(name, {n}, out.random({n}, 0.1f, 1.0f)); };
  const std::string a = p + "attn.";
  out.f32(a + "attn_sink", {H}, out.random({H}, 1.0f));
  out.linear(a + "wq_a", c.q_lora_rank, dim, kFp8);
  norm(a + "q_norm.weight", c.q_lora_rank);
  out.linear(a + "wq_b", H * hd, c.q_lora_rank, kFp8);
  out.linear(a + "wkv", hd, dim, kFp8);
  norm(a + "kv_norm.weight", hd);
  out.linear(a + "wo_a", G * c.o_lora_rank, H * hd / G, kFp8);
  out.linear(a + "wo_b", dim, G * c.o_lora_rank, kFp8);
  const bool backbone = layer < c.n_layers;
  const bool kv_source = backbone && contains(c.shared.kv_source_layers, layer);
  if (kv_source) {
    out.linear(a + "compressor.wkv", hd, dim, kBf16);
    if (c.compress_ratios[layer] > 1) out.linear(a + "compressor.wgate", hd, dim, kBf16);
    norm(a + "compressor.norm.weight", hd);
  }
  if (backbone && contains(c.shared.index_source_layers, layer)) {
    out.linear(a + "indexer.wq_b", int64_t{c.index_n_heads} * c.index_head_dim, c.q_lora_rank, kFp8);
    out.linear(a + "indexer.weights_proj", c.index_n_heads, dim, kBf16);
    if (kv_source) {
      out.linear(a + "indexer.wk", c.index_head_dim, hd, kBf16);
      norm(a + "indexer.k_norm.weight", c.index_head_dim);
    }
  }
  norm(p + "attn_norm.weight", dim);
  norm(p + "ffn_norm.weight", dim);
  const int64_t mix = c.mix_hc(), flat = int64_t{c.hc_mult} * dim;
  for (const char* which : {"attn", "ffn"}) {
    out.f32(p + "hc_" + which + "_fn", {mix, flat}, out.random({mix, flat}, 1.0f / std::sqrt(static_cast<float>(flat))));
    out.f32(p + "hc_" + which + "_base", {mix}, out.random({mix}, 0.5f));
    out.f32(p + "hc_" + which + "_scale", {3}, out.random({3}, 0.2f, 1.0f));
  }
  const int64_t E = !backbone && c.dspark_n_routed_experts ? c.dspark_n_routed_experts : c.n_routed_experts;
  out.linear(p + "ffn.gate", E, dim, kBf16);
  out.f32(p + "ffn.gate.bias", {E}, out.random({E}, 0.1f));
  for (int64_t e = 0; e < E; ++e) write_expert(out, p + "ffn.experts." + std::to_string(e) + ".", dim, c.moe_inter_dim, kFp4);
  write_expert(out, p + "ffn.shared_experts.", dim, c.moe_inter_dim, kFp8);
  const auto& ids = c.engram.layer_ids;
  if (const auto it = std::find(ids.begin(), ids.end(), layer); backbone && it != ids.end()) {
    const EngramConfig& e = c.engram;
    out.linear(p + "engram.embed", e.num_embeddings[it - ids.begin()], e.head_dim, kFp8Rows);
    out.linear(p + "engram.wkv", dim * (c.hc_mult + 1), int64_t{e.hash_columns()} * e.head_dim, kFp8);
    for (const char* w : {"engram.q_weight", "engram.k_weight"})
      out.bf16(p + w, {c.hc_mult, dim}, out.random({c.hc_mult, dim}, 0.1f, 1.0f));
  }
}

}  // namespace

StatusOr<json> synthetic_v41_config(const std::string& overrides_json, const PresetCounts& counts) {
  json j = json::parse(released_config_json("v41-flash"));
  if (!overrides_json.empty()) {
    json o;
    try {
      o = json::parse(overrides_json);
    } catch (const std::exception& e) {
      return invalid_argument(std::string("--config is not valid JSON: ") + e.what());
    }
    if (!o.is_object()) return invalid_argument("--config must be a JSON object of text_config fields");
    j["text_config"].merge_patch(o);
  }
  if (counts.layers < 0 || counts.experts < 0 || counts.vocab < 0 || counts.engram_vocab < 0)
    return invalid_argument("layer, expert, vocabulary and Engram row counts must be positive");
  if (counts.dspark) return invalid_argument("--dspark: DeepSeek-V4.1-Flash carries its DSpark drafter already");
  DSV4_ASSIGN_OR_RETURN(ModelConfig released, parse_v41_model_config(j.dump(), "preset 'v41-flash'"));
  json& t = j["text_config"];
  if (counts.layers > 0) DSV4_RETURN_IF_ERROR(keep_layers(t, released, counts.layers));
  if (counts.experts > 0) {
    t["n_routed_experts"] = counts.experts;
    t["num_experts_per_tok"] = std::min(counts.experts, t["num_experts_per_tok"].get<int>());
    t["dspark_n_routed_experts"] = std::min(counts.experts, t["dspark_n_routed_experts"].get<int>());
    t["dspark_num_experts_per_tok"] =
        std::min(t["dspark_n_routed_experts"].get<int>(), t["dspark_num_experts_per_tok"].get<int>());
  }
  if (counts.vocab > 0) {
    if (counts.vocab < 512) return invalid_argument("--vocab must be at least 512 for DeepSeek-V4.1's tokenizer");
    t["vocab_size"] = counts.vocab;
    t["dspark_noise_token_id"] = std::min(t["dspark_noise_token_id"].get<int>(), counts.vocab - 1);
    j["image_token_id"] = std::min(j["image_token_id"].get<int>(), counts.vocab - 1);
  }
  if (counts.engram_vocab > 0) t["engram_vocab_size"] = counts.engram_vocab;
  // Checked now; the Engram sizes are filled in when the tokenizer is made.
  DSV4_RETURN_IF_ERROR(parse_v41_model_config(j.dump(), "preset 'v41-flash'").status());
  return j;
}

Status write_synthetic_v41_checkpoint(json j, const SyntheticOptions& options, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return internal_error("cannot create directory '" + dir + "': " + ec.message());
  json& t = j["text_config"];
  const int vocab = t.at("vocab_size").get<int>();
  if (vocab < 512) return invalid_argument("DeepSeek-V4.1's synthetic tokenizer needs a vocabulary of at least 512");
  const std::string tokenizer_json = synthetic_v41_tokenizer_json(vocab);
  {
    std::ofstream f(dir + "/tokenizer.json");
    f << tokenizer_json << "\n";
    if (!f) return internal_error("cannot write " + dir + "/tokenizer.json");
  }
  // The Engram sizes the tokenizer and the hash layout give.
  DSV4_ASSIGN_OR_RETURN(auto tokenizer, BpeTokenizer::from_json_text(tokenizer_json, "", dir + "/tokenizer.json"));
  const EngramTokenMap map = build_engram_token_map(*tokenizer);
  t["engram_compressed_vocab_size"] = map.size;
  DSV4_ASSIGN_OR_RETURN(ModelConfig c, parse_v41_model_config(j.dump(), dir + "/config.json"));
  if (c.engram.enabled()) {
    const EngramHashLayout layout = engram_hash_layout(c.engram, map.size, map.compressed.at(c.engram.pad_id));
    json rows = json::array();
    for (size_t i = 0; i < layout.primes.size(); ++i) rows.push_back(layout.offsets[i].back() + layout.primes[i].back());
    t["engram_num_embeddings"] = rows;
    DSV4_ASSIGN_OR_RETURN(c, parse_v41_model_config(j.dump(), dir + "/config.json"));
  }

  SyntheticOptions o = options;
  o.weights = SyntheticWeights::kFp8;
  o.mtp_copies_last_block = o.dspark_drafts_agree = false;
  ShardedOutput out(o, c, dir);
  out.bf16("embed.weight", {c.vocab_size, c.dim}, out.random({c.vocab_size, c.dim}, 1.0f));
  for (int i = 0; i < c.n_layers; ++i) write_block(out, c, i, "layers." + std::to_string(i) + ".");
  out.bf16("norm.weight", {c.dim}, out.random({c.dim}, 0.1f, 1.0f));
  out.linear("head", c.vocab_size, c.dim, kBf16);
  if (c.has_dspark()) {
    const int64_t rank = c.dspark_markov_rank;
    out.linear("mtp.0.main_proj", c.dim, int64_t{c.dspark_taps()} * c.dim, kFp8);
    out.bf16("mtp.0.main_norm.weight", {c.dim}, out.random({c.dim}, 0.1f, 1.0f));
    for (int s = 0; s < c.dspark_stages; ++s) write_block(out, c, c.n_layers + s, "mtp." + std::to_string(s) + ".");
    const std::string last = "mtp." + std::to_string(c.dspark_stages - 1) + ".";
    out.bf16(last + "norm.weight", {c.dim}, out.random({c.dim}, 0.1f, 1.0f));
    out.bf16(last + "markov_head.embed.weight", {c.vocab_size, rank}, out.random({c.vocab_size, rank}, 1.0f));
    out.linear(last + "markov_head.head", c.vocab_size, rank, kBf16);
    out.linear(last + "confidence_head.proj", 1, c.dim + rank, kBf16);
  }
  DSV4_RETURN_IF_ERROR(out.write());
  std::ofstream cfg(dir + "/config.json");
  cfg << j.dump(2) << "\n";
  if (!cfg) return internal_error("cannot write " + dir + "/config.json");
  return Status::Ok();
}

}  // namespace dsv4
