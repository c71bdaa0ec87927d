#include "tools/v41_golden_verify.h"

#include <algorithm>
#include <map>
#include <type_traits>

#include "checkpoint/safetensors.h"
#include "model/deepseek_v41.h"

namespace dsv4 {
namespace {

template <typename T>
StatusOr<std::vector<T>> tensor(const SafetensorsFile& f, const std::string& name) {
  const TensorInfo* t = f.find(name);
  if (!t) return invalid_argument(f.path() + " has no tensor " + name);
  const DType want = std::is_same_v<T, int64_t> ? DType::kI64 : DType::kF32;
  if (t->dtype != want)
    return invalid_argument(f.path() + ": " + name + " is " + dtype_name(t->dtype) + ", expected " + dtype_name(want));
  std::vector<T> v(t->nbytes / sizeof(T));
  DSV4_RETURN_IF_ERROR(f.read(*t, 0, t->nbytes, v.data()));
  return v;
}

// The layers' streams of a forward, by name.
struct LayerTrace : ForwardTrace {
  std::map<std::string, std::vector<float>> tensors;
  void record(const std::string& name, const float* rows, int64_t num_rows, int64_t row_size) override {
    tensors[name].assign(rows, rows + num_rows * row_size);
  }
};

}  // namespace

StatusOr<VerifyReport> verify_v41_golden(const DeepseekV41& model, const V41VerifyOptions& o) {
  DSV4_ASSIGN_OR_RETURN(auto file, SafetensorsFile::open(o.golden_path));
  const SafetensorsFile& g = *file;
  const ModelConfig& cfg = model.config();
  const TensorInfo* ids_info = g.find("prompt_ids");
  if (!ids_info || ids_info->shape.size() != 2) return invalid_argument(o.golden_path + " has no prompt_ids [B, S]");
  const int64_t B = ids_info->shape[0], S = ids_info->shape[1], V = cfg.vocab_size;
  const int64_t flat = int64_t{cfg.hc_mult} * cfg.dim, taps = int64_t{cfg.dspark_taps()} * cfg.dim;
  if (o.packed && B < 2) return invalid_argument("packing needs at least two prompts");
  DSV4_ASSIGN_OR_RETURN(const std::vector<int64_t> prompt, tensor<int64_t>(g, "prompt_ids"));
  if (static_cast<int64_t>(prompt.size()) != B * S) return invalid_argument(o.golden_path + ": prompt_ids is damaged");
  for (int64_t t : prompt)
    if (t < 0 || t >= V) return invalid_argument(o.golden_path + ": a prompt token is outside the model's vocabulary");

  std::vector<std::unique_ptr<ContiguousCache>> seqs;
  std::vector<std::vector<int32_t>> seen(B);  // each sequence's tokens so far (Engram's look-back)
  for (int64_t b = 0; b < B; ++b) seqs.push_back(model.new_cache());
  auto add = [&](ForwardBatch* batch, int64_t b, const std::vector<int32_t>& tokens) {
    const int64_t back = std::min<int64_t>(static_cast<int64_t>(seen[b].size()), model.history_tokens());
    batch->add(seqs[b].get(), tokens.data(), static_cast<int64_t>(tokens.size()), S);
    batch->chunks.back().history.assign(seen[b].end() - back, seen[b].end());
    seen[b].insert(seen[b].end(), tokens.begin(), tokens.end());
  };

  // Computed tensors in the golden's layouts.
  std::map<std::string, std::vector<float>> got;
  for (int i = 0; i < cfg.n_layers; ++i) got["layer_out." + std::to_string(i)].assign(B * S * flat, 0.0f);
  got["main_hidden"].assign(B * S * taps, 0.0f);
  got["prefill_logits"].assign(B * V, 0.0f);

  // Prefill: each prompt alone (or packed), in chunks.
  const int64_t chunk = o.chunk > 0 ? o.chunk : S;
  for (int64_t p0 = 0; p0 < S; p0 += chunk) {
    const int64_t n = std::min(chunk, S - p0);
    std::vector<std::vector<int64_t>> groups;
    if (o.packed) {
      groups.emplace_back();
      for (int64_t b = 0; b < B; ++b) groups.back().push_back(b);
    } else {
      for (int64_t b = 0; b < B; ++b) groups.push_back({b});
    }
    for (const auto& group : groups) {
      ForwardBatch batch;
      LayerTrace trace;
      batch.trace = &trace;
      batch.want_taps = cfg.has_dspark();
      for (int64_t b : group) {
        const auto first = prompt.begin() + b * S + p0;
        add(&batch, b, std::vector<int32_t>(first, first + n));
      }
      ForwardOutput out;
      DSV4_RETURN_IF_ERROR(model.forward(batch, &out));
      for (size_t k = 0; k < group.size(); ++k) {
        const int64_t b = group[k], row0 = static_cast<int64_t>(k) * n;
        for (int i = 0; i < cfg.n_layers; ++i) {
          const std::vector<float>& rows = trace.tensors["layer_out." + std::to_string(i)];
          std::copy_n(&rows[row0 * flat], n * flat, &got["layer_out." + std::to_string(i)][(b * S + p0) * flat]);
        }
        if (cfg.has_dspark()) {
          std::copy_n(&out.taps[row0 * taps], n * taps, &got["main_hidden"][(b * S + p0) * taps]);
          // The prefill's forward_spec only fills the drafter's rings.
          DSV4_RETURN_IF_ERROR(model.dspark_fill(seqs[b].get(), &out.taps[row0 * taps], n, p0));
        }
        std::copy_n(&out.logits[k * V], V, &got["prefill_logits"][b * V]);
      }
    }
  }

  // Decode on the reference's tokens, both sequences each step, then a
  // draft from each step's greedy token.
  DSV4_ASSIGN_OR_RETURN(const std::vector<int64_t> decode_ids, tensor<int64_t>(g, "decode_ids"));
  const int64_t T = static_cast<int64_t>(decode_ids.size()) / B;
  if (T * B != static_cast<int64_t>(decode_ids.size())) return invalid_argument(o.golden_path + ": decode_ids is damaged");
  const GoldenBounds& bounds = o.bounds;
  std::vector<int64_t> drafted, want_ids;
  if (cfg.has_dspark()) {
    DSV4_ASSIGN_OR_RETURN(want_ids, tensor<int64_t>(g, "dspark_ids"));
    if (static_cast<int64_t>(want_ids.size()) % (T * B) != 0)
      return invalid_argument(o.golden_path + ": dspark_ids does not hold a draft per decode step and sequence");
    for (int64_t id : want_ids)
      if (id < 0 || id >= V) return invalid_argument(o.golden_path + ": a dspark_ids token is outside the vocabulary");
  }
  const int64_t draft_ids = T * B != 0 ? static_cast<int64_t>(want_ids.size()) / (T * B) : 0;
  VerifyReport report;
  for (int64_t t = 0; t < T; ++t) {
    ForwardBatch batch;
    batch.want_taps = cfg.has_dspark();
    for (int64_t b = 0; b < B; ++b) {
      const int64_t id = decode_ids[t * B + b];
      if (id < 0 || id >= V) return invalid_argument(o.golden_path + ": a decode token is outside the vocabulary");
      add(&batch, b, {static_cast<int32_t>(id)});
    }
    ForwardOutput out;
    DSV4_RETURN_IF_ERROR(model.forward(batch, &out));
    auto& logits = got["decode_logits"];
    logits.insert(logits.end(), out.logits.begin(), out.logits.end());
    if (!cfg.has_dspark()) continue;
    std::vector<DSparkCall> calls(B);
    for (int64_t b = 0; b < B; ++b) {
      const float* row = &out.logits[b * V];
      calls[b].cache = seqs[b].get();
      calls[b].position = S + t;
      // Exact: the draft starts from this step's own greedy token. Other
      // implementations are teacher-forced here as in decoding: from the
      // reference's (dspark_ids' first), so one step's other argmax does
      // not change a whole draft.
      calls[b].anchor = bounds.greedy_identical ? static_cast<int32_t>(std::max_element(row, row + V) - row)
                                                : static_cast<int32_t>(want_ids[(t * B + b) * draft_ids]);
      calls[b].tap = &out.taps[b * taps];
      calls[b].reference_index = b;  // the reference drafts the sequences together
      calls[b].reference_batch = B;
    }
    std::vector<DSparkDraft> drafts;
    DSV4_RETURN_IF_ERROR(model.dspark_draft(calls, &drafts));
    for (const DSparkDraft& d : drafts) {
      got["dspark_logits"].insert(got["dspark_logits"].end(), d.logits.begin(), d.logits.end());
      got["dspark_confidence"].insert(got["dspark_confidence"].end(), d.confidence.begin(), d.confidence.end());
      drafted.insert(drafted.end(), d.ids.begin(), d.ids.end());
    }
  }

  // Every tensor within its bound (bit-identical in exact numerics), the
  // drafted tokens the reference's.
  for (const auto& [name, values] : got) {
    TensorCheck c;
    c.name = name;
    c.bound = bounds.bound(name);
    auto want = tensor<float>(g, name);
    if (!want.ok()) c.problem = "missing from the golden";
    else if (want->size() != values.size()) c.problem = "computed " + std::to_string(values.size()) + " values, the golden holds " + std::to_string(want->size());
    else c.rel_l2 = relative_l2(values.data(), want->data(), static_cast<int64_t>(values.size()));
    report.tensors.push_back(c);
  }
  report.golden_outputs = static_cast<int>(report.tensors.size());
  if (cfg.has_dspark()) {
    RateCheck ids{"dspark_ids", 0, static_cast<int>(want_ids.size()), bounds.dspark_ids_min};
    for (size_t i = 0; i < want_ids.size() && i < drafted.size(); ++i) ids.match += drafted[i] == want_ids[i];
    report.rates.push_back(ids);
  }
  // The reference's greedy tokens: the first decode step's input is the
  // prompt's argmax, each later one the previous step's. Other
  // implementations: the prompts' next tokens when the bounds ask, and a
  // share of the decode steps' argmax agreeing with the golden logits'.
  const std::vector<float>& logits = got["decode_logits"];
  if (bounds.greedy_identical || bounds.prefill_greedy_identical)
    for (int64_t b = 0; b < B && T > 0; ++b) {
      const float* row = &got["prefill_logits"][b * V];
      ++report.prefill_total;
      report.prefill_match += std::max_element(row, row + V) - row == decode_ids[b];
    }
  if (bounds.greedy_identical) {
    for (int64_t t = 0; t + 1 < T; ++t)
      for (int64_t b = 0; b < B; ++b) {
        const float* row = &logits[(t * B + b) * V];
        ++report.greedy_total;
        report.greedy_match += std::max_element(row, row + V) - row == decode_ids[(t + 1) * B + b];
      }
    return report;
  }
  report.greedy_required = bounds.decode_argmax_min;
  DSV4_ASSIGN_OR_RETURN(const std::vector<float> want_logits, tensor<float>(g, "decode_logits"));
  for (int64_t i = 0; i < T * B && (i + 1) * V <= static_cast<int64_t>(std::min(logits.size(), want_logits.size())); ++i) {
    const float* row = &logits[i * V];
    const float* want = &want_logits[i * V];
    ++report.greedy_total;
    report.greedy_match += std::max_element(row, row + V) - row == std::max_element(want, want + V) - want;
  }
  return report;
}

}  // namespace dsv4
