#include "runtime/step_plan.h"

#include <cstring>

namespace dsv4 {
namespace {

class Writer {
 public:
  template <typename T>
  void put(const T& v) {
    const char* p = reinterpret_cast<const char*>(&v);
    out.insert(out.end(), p, p + sizeof(T));
  }
  template <typename T>
  void put_vector(const std::vector<T>& v) {
    put<uint64_t>(v.size());
    if (v.empty()) return;
    const char* p = reinterpret_cast<const char*>(v.data());
    out.insert(out.end(), p, p + sizeof(T) * v.size());
  }
  std::vector<char> out;
};

class Reader {
 public:
  Reader(const char* data, size_t size) : p_(data), end_(data + size) {}
  template <typename T>
  bool get(T* v) {
    if (static_cast<size_t>(end_ - p_) < sizeof(T)) return false;
    std::memcpy(v, p_, sizeof(T));
    p_ += sizeof(T);
    return true;
  }
  template <typename T>
  bool get_vector(std::vector<T>* v) {
    uint64_t n = 0;
    if (!get(&n) || n > static_cast<uint64_t>(end_ - p_) / sizeof(T)) return false;
    v->resize(n);
    if (n) std::memcpy(v->data(), p_, sizeof(T) * n);
    p_ += sizeof(T) * n;
    return true;
  }
  bool done() const { return p_ == end_; }

 private:
  const char* p_;
  const char* end_;
};

}  // namespace

StatusOr<std::vector<SampledLogits>> merge_group_results(const StepPlan& plan, std::vector<GroupResult> groups) {
  std::vector<size_t> next(groups.size(), 0);
  std::vector<SampledLogits> out;
  for (const PlannedChunk& c : plan.chunks) {
    for (int64_t i = 0; i < results_of(plan, c); ++i) {
      if (c.group >= static_cast<int>(groups.size()) || next[c.group] >= groups[c.group].size())
        return internal_error("a group's result is missing rows");
      out.push_back(std::move(groups[c.group][next[c.group]++]));
    }
  }
  return out;
}

std::vector<char> serialize(const StepPlan& plan) {
  Writer w;
  w.put<uint8_t>(plan.stop);
  w.put<uint8_t>(plan.draft);
  w.put<uint8_t>(plan.keep_hidden);
  w.put<uint8_t>(plan.keep_raw_kv);
  w.put<uint8_t>(plan.keep_taps);
  w.put<uint8_t>(plan.dspark);
  w.put_vector(plan.argmax_only);
  w.put<uint64_t>(plan.chunks.size());
  for (const PlannedChunk& c : plan.chunks) {
    w.put<int32_t>(c.group);
    w.put(c.start);
    w.put(c.prefill_len);
    w.put<uint8_t>(c.samples);
    w.put<uint8_t>(c.all_logits);
    w.put(c.draft_rows);
    w.put<uint8_t>(c.reset_states);
    w.put(c.cached_until);
    w.put(c.source);
    w.put(c.drafts);
    w.put(c.draft_temperature);
    w.put(c.draft_seed);
    w.put_vector(c.tokens);
    w.put_vector(c.history);
    w.put(c.pages.covered);
    for (const auto& ids : c.pages.pages) w.put_vector(ids);
  }
  return std::move(w.out);
}

StatusOr<StepPlan> deserialize_plan(const std::vector<char>& bytes) {
  Reader r(bytes.data(), bytes.size());
  StepPlan plan;
  uint8_t stop = 0, draft = 0, keep = 0, raw = 0, taps = 0, dspark = 0;
  uint64_t n = 0;
  bool ok = r.get(&stop) && r.get(&draft) && r.get(&keep) && r.get(&raw) && r.get(&taps) && r.get(&dspark) &&
            r.get_vector(&plan.argmax_only) && r.get(&n);
  plan.keep_taps = taps;
  plan.dspark = dspark;
  plan.keep_raw_kv = raw;
  plan.stop = stop;
  plan.draft = draft;
  plan.keep_hidden = keep;
  for (uint64_t i = 0; ok && i < n; ++i) {
    PlannedChunk c;
    int32_t group = 0;
    uint8_t samples = 0, all_logits = 0, reset = 0;
    ok = r.get(&group) && r.get(&c.start) && r.get(&c.prefill_len) && r.get(&samples) && r.get(&all_logits) &&
         r.get(&c.draft_rows) &&
         r.get(&reset) && r.get(&c.cached_until) && r.get(&c.source) && r.get(&c.drafts) && r.get(&c.draft_temperature) && r.get(&c.draft_seed) && r.get_vector(&c.tokens) &&
         r.get_vector(&c.history) && r.get(&c.pages.covered);
    for (auto& ids : c.pages.pages) ok = ok && r.get_vector(&ids);
    c.group = group;
    c.samples = samples;
    c.all_logits = all_logits;
    c.reset_states = reset;
    plan.chunks.push_back(std::move(c));
  }
  if (!ok || !r.done()) return internal_error("a step plan arrived damaged");
  return plan;
}

std::vector<char> serialize(const GroupResult& result) {
  Writer w;
  w.put<uint64_t>(result.size());
  for (const SampledLogits& s : result) {
    w.put(s.argmax);
    w.put_vector(s.logits);
    w.put_vector(s.drafts);
    w.put_vector(s.draft_confidence);
    w.put_vector(s.draft_logits);
  }
  return std::move(w.out);
}

StatusOr<GroupResult> deserialize_result(const char* data, size_t size) {
  Reader r(data, size);
  uint64_t n = 0;
  bool ok = r.get(&n);
  GroupResult out;
  for (uint64_t i = 0; ok && i < n; ++i) {
    SampledLogits s;
    ok = r.get(&s.argmax) && r.get_vector(&s.logits) && r.get_vector(&s.drafts) &&
         r.get_vector(&s.draft_confidence) && r.get_vector(&s.draft_logits);
    out.push_back(std::move(s));
  }
  if (!ok || !r.done()) return internal_error("a step result arrived damaged");
  return out;
}

}  // namespace dsv4
