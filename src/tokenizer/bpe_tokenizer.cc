#include "tokenizer/bpe_tokenizer.h"

#include <algorithm>
#include <fstream>
#include <limits>
#include <queue>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/utf8.h"
#include "tokenizer/incremental_detokenizer.h"

namespace dsv4 {
namespace {

using nlohmann::json;

// GPT-2's split, used by a ByteLevel pre-tokenizer with use_regex.
constexpr char kGpt2Pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";


bool printable_byte(int b) { return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255); }

StatusOr<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string token_text(const json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string()) return j["content"].get<std::string>();
  return "";
}

// Pieces of `text` split at the regex's matches, matches kept (Isolated).
void split_isolated(const Regex& re, const std::string& text, std::vector<std::string>* out) {
  size_t at = 0;
  for (auto [b, e] : re.find_all(text)) {
    if (b > at) out->push_back(text.substr(at, b - at));
    out->push_back(text.substr(b, e - b));
    at = e;
  }
  if (at < text.size()) out->push_back(text.substr(at));
}

}  // namespace

std::string byte_level_char(uint8_t b) {
  if (printable_byte(b)) return utf8_encode(b);
  int n = 0;
  for (int x = 0; x < b; ++x) n += !printable_byte(x);
  return utf8_encode(256 + n);
}

StatusOr<std::unique_ptr<BpeTokenizer>> BpeTokenizer::load(const std::string& dir) {
  DSV4_ASSIGN_OR_RETURN(std::string tj, read_file(dir + "/tokenizer.json"));
  auto cj = read_file(dir + "/tokenizer_config.json");
  return from_json_text(tj, cj.ok() ? *cj : "", dir + "/tokenizer.json");
}

StatusOr<std::unique_ptr<BpeTokenizer>> BpeTokenizer::from_json_text(const std::string& tokenizer_json,
                                                                     const std::string& config_json,
                                                                     const std::string& source) try {
  json t;
  try {
    t = json::parse(tokenizer_json);
  } catch (const std::exception& e) {
    return invalid_argument(source + ": not valid JSON: " + e.what());
  }
  auto bad = [&](const std::string& what) { return invalid_argument(source + ": " + what); };
  if (!t.is_object() || !t.contains("model") || !t["model"].is_object()) return bad("no 'model' object");
  const json& m = t["model"];
  if (m.value("type", "") != "BPE") return bad("model type must be BPE, got " + m.value("type", std::string("none")));
  if (!m.contains("vocab") || !m["vocab"].is_object()) return bad("model.vocab must be an object");
  if (!m.contains("merges") || !m["merges"].is_array()) return bad("model.merges must be an array");
  if (t.contains("normalizer") && !t["normalizer"].is_null()) {
    const json& n = t["normalizer"];
    if (!(n.value("type", "") == "Sequence" && n.contains("normalizers") && n["normalizers"].empty()))
      return bad("unsupported normalizer " + n.dump().substr(0, 80));
  }

  std::unique_ptr<BpeTokenizer> tok(new BpeTokenizer());
  int32_t max_id = -1;
  for (auto it = m["vocab"].begin(); it != m["vocab"].end(); ++it) {
    if (!it.value().is_number_integer()) return bad("vocab id of '" + it.key() + "' is not an integer");
    const int32_t id = it.value().get<int32_t>();
    if (id < 0) return bad("negative vocab id for '" + it.key() + "'");
    tok->vocab_[it.key()] = id;
    max_id = std::max(max_id, id);
  }
  std::vector<std::pair<int32_t, std::string>> added;
  if (t.contains("added_tokens") && t["added_tokens"].is_array()) {
    for (const json& a : t["added_tokens"]) {
      if (!a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") || !a["content"].is_string())
        return bad("an added token lacks id or content");
      added.emplace_back(a["id"].get<int32_t>(), a["content"].get<std::string>());
      max_id = std::max(max_id, added.back().first);
    }
  }
  tok->id_to_token_.resize(max_id + 1);
  tok->special_.assign(max_id + 1, 0);
  for (const auto& [text, id] : tok->vocab_) tok->id_to_token_[id] = text;
  for (size_t i = 0; i < added.size(); ++i) {
    const auto& [id, content] = added[i];
    tok->id_to_token_[id] = content;
    tok->added_ids_[content] = id;
    tok->added_.push_back(content);
    tok->special_[id] = t["added_tokens"][i].value("special", false) ? 1 : 0;
  }
  std::sort(tok->added_.begin(), tok->added_.end(),
            [](const std::string& a, const std::string& b) { return a.size() > b.size(); });

  // The byte-level alphabet must be in the vocabulary.
  tok->byte_token_.resize(256);
  for (int b = 0; b < 256; ++b) {
    const std::string ch = byte_level_char(static_cast<uint8_t>(b));
    tok->unicode_to_byte_[ch] = static_cast<uint8_t>(b);
    auto it = tok->vocab_.find(ch);
    if (it == tok->vocab_.end()) return bad("the vocabulary lacks the byte-level symbol of byte " + std::to_string(b));
    tok->byte_token_[b] = it->second;
  }
  int32_t rank = 0;
  for (const json& mj : m["merges"]) {
    std::string a, b;
    if (mj.is_string()) {
      const std::string s = mj.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos) return bad("merge '" + s + "' is not 'left right'");
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (mj.is_array() && mj.size() == 2 && mj[0].is_string() && mj[1].is_string()) {
      a = mj[0].get<std::string>();
      b = mj[1].get<std::string>();
    } else {
      return bad("merge #" + std::to_string(rank) + " is malformed");
    }
    auto ia = tok->vocab_.find(a), ib = tok->vocab_.find(b), im = tok->vocab_.find(a + b);
    if (ia == tok->vocab_.end() || ib == tok->vocab_.end() || im == tok->vocab_.end())
      return bad("merge '" + a + " " + b + "' uses tokens outside the vocabulary");
    const uint64_t key = (static_cast<uint64_t>(ia->second) << 32) | static_cast<uint32_t>(ib->second);
    tok->merges_.emplace(key, std::make_pair(rank, im->second));
    ++rank;
  }

  // Pre-tokenizer: Split regexes and ByteLevel, alone or in a Sequence.
  std::vector<json> steps;
  if (t.contains("pre_tokenizer") && !t["pre_tokenizer"].is_null()) {
    const json& p = t["pre_tokenizer"];
    if (p.value("type", "") == "Sequence") {
      for (const json& s : p.value("pretokenizers", json::array())) steps.push_back(s);
    } else {
      steps.push_back(p);
    }
  }
  for (const json& s : steps) {
    const std::string type = s.value("type", "");
    PreSplit step;
    if (type == "Split") {
      if (s.value("behavior", "") != "Isolated" || s.value("invert", false))
        return bad("only Split with behavior Isolated is supported, got " + s.dump().substr(0, 120));
      const json& pat = s.value("pattern", json::object());
      std::string regex;
      if (pat.contains("Regex") && pat["Regex"].is_string()) {
        regex = pat["Regex"].get<std::string>();
      } else if (pat.contains("String") && pat["String"].is_string()) {
        regex = "\\Q" + pat["String"].get<std::string>() + "\\E";
      } else {
        return bad("Split pattern must be Regex or String");
      }
      DSV4_ASSIGN_OR_RETURN(step.regex, Regex::compile(regex));
    } else if (type == "ByteLevel") {
      if (s.value("add_prefix_space", false)) return bad("ByteLevel add_prefix_space is not supported");
      if (s.value("use_regex", true)) {
        DSV4_ASSIGN_OR_RETURN(step.regex, Regex::compile(kGpt2Pattern));
      }
      step.byte_level = true;
    } else {
      return bad("unsupported pre-tokenizer type '" + type + "'");
    }
    tok->pre_.push_back(std::move(step));
  }

  if (!config_json.empty()) {
    try {
      const json c = json::parse(config_json);
      tok->add_bos_ = c.value("add_bos_token", false);
      if (c.contains("bos_token")) tok->bos_id_ = tok->token_id(token_text(c["bos_token"]));
      if (c.contains("eos_token")) tok->eos_id_ = tok->token_id(token_text(c["eos_token"]));
    } catch (const std::exception& e) {
      return bad(std::string("tokenizer_config.json is not valid JSON: ") + e.what());
    }
  }
  return tok;
} catch (const json::exception& e) {
  // A field of the wrong type (a number where a string belongs, ...) that no
  // check above names: still a broken file, not a crash.
  return invalid_argument(source + ": a field has the wrong JSON type: " + e.what());
}

int32_t BpeTokenizer::token_id(const std::string& token) const {
  if (auto it = added_ids_.find(token); it != added_ids_.end()) return it->second;
  if (auto it = vocab_.find(token); it != vocab_.end()) return it->second;
  return -1;
}

bool BpeTokenizer::is_special(int32_t id) const { return id >= 0 && id < static_cast<int32_t>(special_.size()) && special_[id]; }

void BpeTokenizer::bpe(const std::string& piece, std::vector<int32_t>* out) const {
  {
    std::lock_guard<std::mutex> lock(cache_mu_);
    if (auto it = cache_.find(piece); it != cache_.end()) {
      out->insert(out->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  // Merge the lowest-ranked adjacent pair (leftmost among equals) until
  // none is left. The symbols are a linked list and the pairs wait in a
  // heap by (rank, position), each checked when it comes out (a merge next
  // to it may have changed it): n log n for a piece of n bytes, where
  // rescanning after every merge took n^2 (a megabyte run of one letter is
  // one piece).
  const size_t n = piece.size();
  std::vector<int32_t> sym(n);
  std::vector<size_t> next(n), prev(n);
  for (size_t i = 0; i < n; ++i) {
    sym[i] = byte_token_[static_cast<unsigned char>(piece[i])];
    next[i] = i + 1;
    prev[i] = i - 1;  // wraps for the first: never read
  }
  struct Pair {
    int32_t rank;
    size_t left;
    int32_t a, b;  // the symbols it was found with
    bool operator>(const Pair& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::priority_queue<Pair, std::vector<Pair>, std::greater<Pair>> heap;
  auto consider = [&](size_t left) {
    if (left >= n || next[left] >= n) return;
    const uint64_t key = (static_cast<uint64_t>(sym[left]) << 32) | static_cast<uint32_t>(sym[next[left]]);
    if (auto it = merges_.find(key); it != merges_.end()) heap.push({it->second.first, left, sym[left], sym[next[left]]});
  };
  for (size_t i = 0; i + 1 < n; ++i) consider(i);
  std::vector<bool> gone(n, false);
  while (!heap.empty()) {
    const Pair p = heap.top();
    heap.pop();
    if (gone[p.left] || sym[p.left] != p.a || next[p.left] >= n || sym[next[p.left]] != p.b) continue;  // stale
    const uint64_t key = (static_cast<uint64_t>(p.a) << 32) | static_cast<uint32_t>(p.b);
    const size_t right = next[p.left];
    sym[p.left] = merges_.at(key).second;
    gone[right] = true;
    next[p.left] = next[right];
    if (next[right] < n) prev[next[right]] = p.left;
    if (p.left > 0 && prev[p.left] < n) consider(prev[p.left]);
    consider(p.left);
  }
  std::vector<int32_t> merged;
  for (size_t i = 0; i < n; i = next[i]) merged.push_back(sym[i]);
  out->insert(out->end(), merged.begin(), merged.end());
  if (n > 256) return;  // long pieces are rare: the cache keeps the common ones
  std::lock_guard<std::mutex> lock(cache_mu_);
  if (cache_.size() > 200000) cache_.clear();
  cache_.emplace(piece, std::move(merged));
}

void BpeTokenizer::encode_plain(const std::string& text, std::vector<int32_t>* out) const {
  std::vector<std::string> pieces = {text}, next;
  for (const PreSplit& step : pre_) {
    if (!step.regex) continue;
    next.clear();
    for (const std::string& p : pieces) split_isolated(*step.regex, p, &next);
    pieces.swap(next);
  }
  // The byte-level mapping is implicit: bpe() starts from each byte's symbol.
  for (const std::string& p : pieces) bpe(p, out);
}

std::vector<int32_t> BpeTokenizer::encode(const std::string& raw) const {
  std::string rest;
  std::string text = utf8_complete_prefix(raw, &rest);  // invalid UTF-8 becomes U+FFFD
  if (!rest.empty()) text += "\xEF\xBF\xBD";
  std::vector<int32_t> out;
  size_t plain_from = 0, i = 0;
  while (i < text.size()) {
    const std::string* hit = nullptr;
    for (const std::string& a : added_)  // longest first
      if (text.compare(i, a.size(), a) == 0) {
        hit = &a;
        break;
      }
    if (!hit) {
      ++i;
      continue;
    }
    if (i > plain_from) encode_plain(text.substr(plain_from, i - plain_from), &out);
    out.push_back(added_ids_.at(*hit));
    i += hit->size();
    plain_from = i;
  }
  if (plain_from < text.size()) encode_plain(text.substr(plain_from), &out);
  return out;
}

std::string BpeTokenizer::token_bytes(int32_t id) const {
  if (id < 0 || id >= static_cast<int32_t>(id_to_token_.size())) return "";
  const std::string& t = id_to_token_[id];
  if (added_ids_.count(t) && added_ids_.at(t) == id) return t;
  std::string bytes;
  for (size_t i = 0; i < t.size();) {
    size_t len = 1;
    const unsigned char c = t[i];
    if (c >= 0xF0) len = 4;
    else if (c >= 0xE0) len = 3;
    else if (c >= 0xC0) len = 2;
    auto it = unicode_to_byte_.find(t.substr(i, len));
    if (it != unicode_to_byte_.end()) bytes += static_cast<char>(it->second);
    else bytes += t.substr(i, len);
    i += len;
  }
  return bytes;
}

}  // namespace dsv4
