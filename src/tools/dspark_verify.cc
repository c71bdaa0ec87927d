#include "tools/dspark_verify.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <memory>
#include <nlohmann/json.hpp>

#include "checkpoint/safetensors.h"
#include "checkpoint/safetensors_writer.h"
#include "kernels/cache_rows.h"
#include "model/contiguous_cache.h"
#include "model/deepseek_v4.h"

namespace dsv4 {
namespace {

struct Golden {
  std::unique_ptr<SafetensorsFile> file;
  std::string path;

  StatusOr<const TensorInfo*> get(const std::string& name, DType dtype) const {
    const TensorInfo* t = file->find(name);
    if (!t) return not_found(path + ": golden tensor '" + name + "' is missing");
    if (t->dtype != dtype) return invalid_argument(path + ": golden tensor '" + name + "' has dtype " + dtype_name(t->dtype));
    return t;
  }
  StatusOr<std::vector<int64_t>> ints(const std::string& name) const {
    DSV4_ASSIGN_OR_RETURN(const TensorInfo* t, get(name, DType::kI64));
    std::vector<int64_t> v(t->numel());
    std::memcpy(v.data(), t->data, t->nbytes);
    return v;
  }
  StatusOr<std::vector<float>> floats(const std::string& name) const {
    DSV4_ASSIGN_OR_RETURN(const TensorInfo* t, get(name, DType::kF32));
    std::vector<float> v(t->numel());
    std::memcpy(v.data(), t->data, t->nbytes);
    return v;
  }
};

// The case's bounds for one protocol (case.json compare.bounds).
struct ProtocolBounds {
  std::map<std::string, double> group;  // target, context, draft -> rel L2
  std::map<std::string, double> agree;  // draft_ids_agree, ... -> share
};

StatusOr<ProtocolBounds> read_bounds(const std::string& golden_path, bool end_to_end) {
  const std::string path = (std::filesystem::path(golden_path).parent_path() / "case.json").string();
  std::ifstream in(path);
  if (!in) return not_found("cannot read " + path + " (the DSpark case's bounds)");
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  const char* which = end_to_end ? "end_to_end" : "drafter_isolated";
  if (!j.is_object() || !j.contains("compare") || !j["compare"].contains("bounds") || !j["compare"]["bounds"].contains(which))
    return invalid_argument(path + ": no compare.bounds." + which);
  const nlohmann::json& b = j["compare"]["bounds"][which];
  ProtocolBounds out;
  for (const auto& [group, bound] : b.at("rel_l2").items()) out.group[group] = bound.get<double>();
  for (const auto& [key, value] : b.items())
    if (key != "rel_l2" && value.is_number()) out.agree[key] = value.get<double>();
  return out;
}

// The group a compared tensor belongs to (DSPARK.md).
std::string group_of(const std::string& name) {
  for (const char* t : {"prefill_logits", "prefill_main_hidden", "decode_logits", "decode_main_hidden"})
    if (name == t) return "target";
  if (name == "prefill_main_x" || name == "draft_main_x" || name.rfind("prefill_ring.", 0) == 0 ||
      name.rfind("final_ring.", 0) == 0)
    return "context";
  return "draft";
}

}  // namespace

bool is_dspark_golden(const std::string& golden_path) {
  auto g = SafetensorsFile::open(golden_path);
  return g.ok() && (*g)->find("draft_ids") != nullptr;
}

StatusOr<VerifyReport> verify_dspark(const DeepseekV4& model, const DSparkVerifyOptions& opt) {
  const ModelConfig& c = model.config();
  if (!c.has_dspark() || !model.weights().dspark) return invalid_argument("the model has no DSpark drafter");
  Golden g;
  g.path = opt.golden_path;
  DSV4_ASSIGN_OR_RETURN(g.file, SafetensorsFile::open(opt.golden_path));
  // A W8A8 checkpoint re-quantizes every linear, so the reference's own
  // roundings are gone even with the golden taps: its drafter is held to the
  // bounds of an independent implementation (the end-to-end ones).
  DSV4_ASSIGN_OR_RETURN(ProtocolBounds bounds, read_bounds(opt.golden_path, opt.end_to_end || model_is_w8a8(model)));
  DSV4_ASSIGN_OR_RETURN(const TensorInfo* prompt_t, g.get("prompt_ids", DType::kI64));
  DSV4_ASSIGN_OR_RETURN(const TensorInfo* ids_t, g.get("draft_ids", DType::kI64));
  const int64_t B = prompt_t->shape[0], S = prompt_t->shape[1], N = ids_t->shape[0], K = c.dspark_block_size;
  const int64_t V = c.vocab_size, D = c.dim, hc = c.hc_mult, L = c.dspark_taps(), W = c.window_size, Dh = c.head_dim;
  if (ids_t->shape != std::vector<int64_t>{N, B, K + 1})
    return invalid_argument(opt.golden_path + ": draft_ids has shape " + ids_t->shape_string() + ", which does not fit the model's block of " + std::to_string(K));
  DSV4_ASSIGN_OR_RETURN(auto prompt, g.ints("prompt_ids"));
  DSV4_ASSIGN_OR_RETURN(auto decode, g.ints("decode_ids"));
  DSV4_ASSIGN_OR_RETURN(auto start_pos, g.ints("draft_start_pos"));
  DSV4_ASSIGN_OR_RETURN(auto draft_ids, g.ints("draft_ids"));
  DSV4_ASSIGN_OR_RETURN(auto t1_ids, g.ints("draft_t1_ids"));
  DSV4_ASSIGN_OR_RETURN(auto t1_noise, g.floats("draft_t1_noise"));
  const int64_t T = static_cast<int64_t>(decode.size()) / B;
  if (N != T + 1 || static_cast<int64_t>(start_pos.size()) != N)
    return invalid_argument(opt.golden_path + ": expected one draft call after prefill and one per decode step");

  std::map<std::string, std::vector<float>> computed;
  std::map<std::string, std::vector<int64_t>> shapes;
  VerifyReport report;

  // The taps: the golden's (isolated) or the target's own (end to end).
  std::vector<float> prefill_taps, decode_taps;
  if (!opt.end_to_end) {
    DSV4_ASSIGN_OR_RETURN(prefill_taps, g.floats("prefill_main_hidden"));
    DSV4_ASSIGN_OR_RETURN(decode_taps, g.floats("decode_main_hidden"));
  } else {
    prefill_taps.assign(B * S * L * D, 0.0f);
    decode_taps.assign(T * B * L * D, 0.0f);
    std::vector<float> prefill_logits(B * V), decode_logits(T * B * V);
    std::vector<ContiguousCache> states;
    for (int64_t b = 0; b < B; ++b) states.push_back(model.new_sequence());
    const int64_t chunk = opt.chunk > 0 ? opt.chunk : S;
    for (int64_t s0 = 0; s0 < S; s0 += chunk) {
      const int64_t n = std::min(chunk, S - s0);
      ForwardBatch batch;
      batch.want_taps = true;
      for (int64_t b = 0; b < B; ++b) {
        std::vector<int32_t> ids(prompt.begin() + b * S + s0, prompt.begin() + b * S + s0 + n);
        batch.add(&states[b], ids.data(), n, /*prefill_len=*/S);
      }
      ForwardOutput out;
      DSV4_RETURN_IF_ERROR(model.forward(batch, &out));
      for (int64_t b = 0; b < B; ++b)
        std::copy_n(&out.taps[b * n * L * D], n * L * D, &prefill_taps[(b * S + s0) * L * D]);
      if (s0 + n == S) std::copy(out.logits.begin(), out.logits.begin() + B * V, prefill_logits.begin());
    }
    for (int64_t t = 0; t < T; ++t) {
      ForwardBatch batch;
      batch.want_taps = true;
      for (int64_t b = 0; b < B; ++b) {
        const int32_t id = static_cast<int32_t>(decode[t * B + b]);
        batch.add(&states[b], &id, 1);
      }
      ForwardOutput out;
      DSV4_RETURN_IF_ERROR(model.forward(batch, &out));
      std::copy_n(out.taps.begin(), B * L * D, decode_taps.begin() + t * B * L * D);
      std::copy(out.logits.begin(), out.logits.begin() + B * V, decode_logits.begin() + t * B * V);
    }
    computed["prefill_logits"] = prefill_logits;
    shapes["prefill_logits"] = {B, V};
    computed["prefill_main_hidden"] = prefill_taps;
    shapes["prefill_main_hidden"] = {B, S, L * D};
    computed["decode_logits"] = decode_logits;
    shapes["decode_logits"] = {T, B, V};
    computed["decode_main_hidden"] = decode_taps;
    shapes["decode_main_hidden"] = {T, B, L * D};
    DSV4_ASSIGN_OR_RETURN(auto golden_logits, g.floats("decode_logits"));
    RateCheck agree{"decode_argmax_agree", 0, 0, bounds.agree["decode_argmax_agree"]};
    for (int64_t i = 0; i < T * B; ++i) {
      ++agree.total;
      agree.match += std::max_element(&decode_logits[i * V], &decode_logits[(i + 1) * V]) - &decode_logits[i * V] ==
                     std::max_element(&golden_logits[i * V], &golden_logits[(i + 1) * V]) - &golden_logits[i * V];
    }
    report.rates.push_back(agree);
  }

  // Prefill: every prompt row's main_x, the last window into the rings.
  const kernels::KvRowFormat fmt{Dh - c.rope_head_dim, c.rope_head_dim};
  // Each sequence's rings: the stages' window rows in a cache of their own.
  const CacheGeometry geometry = CacheGeometry::of(c);
  std::vector<std::unique_ptr<ContiguousCache>> rings;
  std::vector<float> prefill_main_x(B * S * D);
  for (int64_t b = 0; b < B; ++b) {
    rings.push_back(std::make_unique<ContiguousCache>(geometry, c.dspark_cache_layer(0), c.dspark_stages));
    std::vector<float> main_x;
    DSV4_RETURN_IF_ERROR(
        model.dspark_fill(rings[b].get(), &prefill_taps[b * S * L * D], S, 0, /*every_row=*/false, &main_x));
    std::copy(main_x.begin(), main_x.end(), prefill_main_x.begin() + b * S * D);
  }
  computed["prefill_main_x"] = prefill_main_x;
  shapes["prefill_main_x"] = {B, S, D};
  // The reference's ring tensor [B, W, Dh] after position p was written:
  // slot j holds the position q <= p with q % W == j (zero while unwritten).
  auto ring_values = [&](const std::string& name, int64_t p) {
    for (int s = 0; s < c.dspark_stages; ++s) {
      std::vector<float> v(B * W * Dh, 0.0f);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t j = 0; j < W; ++j)
          if (const int64_t q = p - ((p - j) % W + W) % W; q >= 0)
            kernels::load_kv_row(rings[b]->window_row(c.dspark_cache_layer(s), q), fmt, &v[(b * W + j) * Dh]);
      computed[name + "." + std::to_string(s)] = std::move(v);
      shapes[name + "." + std::to_string(s)] = {B, W, Dh};
    }
  };
  ring_values("prefill_ring", S - 1);

  // The draft calls, greedy and at temperature 1, both sequences together
  // as the reference batches them.
  std::vector<float> main_x(N * B * D), hidden(N * B * K * D), base(N * B * K * V), logits(N * B * K * V),
      conf(N * B * K), t1_logits(N * B * K * V), t1_conf(N * B * K);
  std::vector<std::vector<float>> stage_out(c.dspark_stages, std::vector<float>(N * B * K * hc * D));
  RateCheck ids_agree{"draft_ids_agree", 0, 0, bounds.agree["draft_ids_agree"]};
  RateCheck t1_agree{"draft_t1_ids_agree", 0, 0, bounds.agree["draft_t1_ids_agree"]};
  for (int64_t n = 0; n < N; ++n) {
    std::vector<std::vector<int32_t>> prev(B), prev_t1(B);
    for (int temperature = 0; temperature <= 1; ++temperature) {
      std::vector<DSparkCall> calls(B);
      for (int64_t b = 0; b < B; ++b) {
        const std::vector<int64_t>& chain = temperature ? t1_ids : draft_ids;
        std::vector<int32_t>& p = temperature ? prev_t1[b] : prev[b];
        for (int64_t j = 0; j < K; ++j) p.push_back(static_cast<int32_t>(chain[(n * B + b) * (K + 1) + j]));
        DSparkCall& call = calls[b];
        call.cache = rings[b].get();
        call.position = start_pos[n];
        call.anchor = p[0];
        call.tap = n == 0 ? &prefill_taps[(b * S + S - 1) * L * D] : &decode_taps[((n - 1) * B + b) * L * D];
        call.temperature = static_cast<float>(temperature);
        call.noise = temperature ? &t1_noise[(n * B + b) * K * V] : nullptr;
        call.forced_prev = p.data();
        call.reference_index = b;
        call.reference_batch = B;
      }
      std::vector<DSparkDraft> out;
      DSV4_RETURN_IF_ERROR(model.dspark_draft(calls, &out, /*details=*/true));
      for (int64_t b = 0; b < B; ++b) {
        const DSparkDraft& o = out[b];
        const int64_t at = n * B + b;
        const std::vector<int64_t>& chain = temperature ? t1_ids : draft_ids;
        RateCheck& agree = temperature ? t1_agree : ids_agree;
        for (int64_t j = 0; j < K; ++j) {
          ++agree.total;
          agree.match += o.ids[j + 1] == chain[at * (K + 1) + j + 1];
        }
        std::copy(o.logits.begin(), o.logits.end(), (temperature ? t1_logits : logits).begin() + at * K * V);
        std::copy(o.confidence.begin(), o.confidence.end(), (temperature ? t1_conf : conf).begin() + at * K);
        if (temperature) continue;
        std::copy(o.main_x.begin(), o.main_x.end(), main_x.begin() + at * D);
        std::copy(o.hidden.begin(), o.hidden.end(), hidden.begin() + at * K * D);
        std::copy(o.base_logits.begin(), o.base_logits.end(), base.begin() + at * K * V);
        for (int s = 0; s < c.dspark_stages; ++s)
          std::copy(o.stage_out[s].begin(), o.stage_out[s].end(), stage_out[s].begin() + at * K * hc * D);
      }
    }
  }
  computed["draft_main_x"] = main_x;
  shapes["draft_main_x"] = {N, B, D};
  for (int s = 0; s < c.dspark_stages; ++s) {
    computed["draft_stage_out." + std::to_string(s)] = stage_out[s];
    shapes["draft_stage_out." + std::to_string(s)] = {N, B, K, hc, D};
  }
  computed["draft_hidden"] = hidden;
  shapes["draft_hidden"] = {N, B, K, D};
  computed["draft_base_logits"] = base;
  shapes["draft_base_logits"] = {N, B, K, V};
  computed["draft_logits"] = logits;
  shapes["draft_logits"] = {N, B, K, V};
  computed["draft_confidence"] = conf;
  shapes["draft_confidence"] = {N, B, K};
  computed["draft_t1_logits"] = t1_logits;
  shapes["draft_t1_logits"] = {N, B, K, V};
  computed["draft_t1_confidence"] = t1_conf;
  shapes["draft_t1_confidence"] = {N, B, K};
  ring_values("final_ring", start_pos[N - 1]);
  report.rates.push_back(ids_agree);
  report.rates.push_back(t1_agree);

  // Compare, in the case's order; ring slots never written are left out.
  const int64_t prefill_slots = std::min(S, W);
  std::vector<std::string> order = {"prefill_logits", "prefill_main_hidden", "decode_logits", "decode_main_hidden",
                                    "prefill_main_x"};
  for (int s = 0; s < c.dspark_stages; ++s) order.push_back("prefill_ring." + std::to_string(s));
  order.push_back("draft_main_x");
  for (int s = 0; s < c.dspark_stages; ++s) order.push_back("draft_stage_out." + std::to_string(s));
  for (const char* n : {"draft_hidden", "draft_base_logits", "draft_logits", "draft_confidence", "draft_t1_logits",
                        "draft_t1_confidence"})
    order.push_back(n);
  for (int s = 0; s < c.dspark_stages; ++s) order.push_back("final_ring." + std::to_string(s));
  // The golden's other F32 tensors are outputs too, except what this
  // protocol feeds: the Exp(1) noise, and in the isolated one the target's
  // logits and taps. Each output is compared; one not computed fails.
  std::vector<std::string> inputs = {"draft_t1_noise"};
  if (!opt.end_to_end)
    for (const char* n : {"prefill_logits", "prefill_main_hidden", "decode_logits", "decode_main_hidden"})
      inputs.push_back(n);
  auto listed = [](const std::vector<std::string>& names, const std::string& n) {
    return std::find(names.begin(), names.end(), n) != names.end();
  };
  for (const auto& [name, t] : g.file->tensors())
    if (t.dtype == DType::kF32 && !listed(inputs, name)) {
      report.golden_outputs++;
      if (!listed(order, name)) order.push_back(name);
    }
  for (const std::string& name : order) {
    if (listed(inputs, name)) continue;
    const auto it = computed.find(name);
    const TensorInfo* golden = g.file->find(name);
    if (it == computed.end() || !golden) {
      TensorCheck missing;
      missing.name = name;
      missing.problem = !golden ? "missing from the golden" : "not computed";
      report.tensors.push_back(missing);
      continue;
    }
    const TensorInfo& t = *golden;
    if (t.dtype != DType::kF32 || t.numel() != static_cast<int64_t>(it->second.size()))
      return invalid_argument(opt.golden_path + ": golden tensor '" + t.name + "' has shape " + t.shape_string() +
                              ", which does not fit the model");
    std::vector<float> gv(t.numel());
    std::memcpy(gv.data(), t.data, t.nbytes);
    std::vector<float> mine = it->second;
    if (t.name.rfind("prefill_ring.", 0) == 0)
      for (int64_t b = 0; b < B; ++b)
        for (int64_t j = prefill_slots; j < W; ++j) {
          std::fill_n(&mine[(b * W + j) * Dh], Dh, 0.0f);
          std::fill_n(&gv[(b * W + j) * Dh], Dh, 0.0f);
        }
    TensorCheck tc;
    tc.name = t.name;
    tc.rel_l2 = relative_l2(mine.data(), gv.data(), static_cast<int64_t>(gv.size()));
    const auto bound = bounds.group.find(group_of(t.name));
    tc.bound = bound == bounds.group.end() ? -1.0 : bound->second;
    report.tensors.push_back(tc);
  }

  if (!opt.dump_path.empty()) {
    SafetensorsWriter w;
    for (const auto& [name, values] : computed) w.add_f32(name, shapes[name], values);
    DSV4_RETURN_IF_ERROR(w.write(opt.dump_path));
  }
  return report;
}

}  // namespace dsv4
