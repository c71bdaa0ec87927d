#include "runtime/rank_worker.h"

#include <algorithm>
#include <memory>
#include <random>

#include "dist/vocab_argmax.h"
#include "kv/kv_cache_manager.h"

namespace dsv4 {

StatusOr<GroupResult> RankWorker::execute(const StepPlan& plan) {
  StatusOr<GroupResult> result = !plan.draft ? forward(plan) : plan.dspark ? draft_dspark(plan) : draft(plan);
  if (result.ok() && !leader()) result->clear();
  return result;
}

bool RankWorker::argmax_only(const StepPlan& plan) const {
  return group_ < static_cast<int>(plan.argmax_only.size()) && plan.argmax_only[group_];
}

GroupResult RankWorker::logit_results(const ForwardOutput& out, int64_t rows, bool argmax_only) const {
  const int64_t part = out.vocab_size, vocab = model_->config().vocab_size;
  GroupResult result(rows);
  if (!argmax_only) {
    for (int64_t i = 0; i < rows; ++i) result[i].logits.assign(&out.logits[i * vocab], &out.logits[(i + 1) * vocab]);
    return result;
  }
  std::vector<int32_t> best(rows);
  if (part != vocab) {
    sharded_argmax(*tp_, out.logits.data(), rows, part, out.vocab_begin, best.data());
  } else {
    for (int64_t i = 0; i < rows; ++i)
      best[i] = static_cast<int32_t>(std::max_element(&out.logits[i * part], &out.logits[(i + 1) * part]) -
                                     &out.logits[i * part]);
  }
  for (int64_t i = 0; i < rows; ++i) result[i].argmax = best[i];
  return result;
}

StatusOr<GroupResult> RankWorker::forward(const StepPlan& plan) {
  ForwardBatch batch;
  std::vector<std::unique_ptr<PagedSequenceCache>> caches;
  std::vector<int64_t> row_begin(plan.chunks.size(), -1);
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    const PlannedChunk& c = plan.chunks[i];
    if (c.group != group_) continue;
    caches.push_back(std::make_unique<PagedSequenceCache>(store_, &c.pages, c.start));
    if (c.reset_states) caches.back()->reset_states();
    row_begin[i] = batch.num_rows();
    batch.add(caches.back().get(), c.tokens.data(), static_cast<int64_t>(c.tokens.size()), c.prefill_len,
              c.logit_rows());
    batch.chunks.back().keep_all_window_rows = plan.keep_raw_kv;
    batch.chunks.back().cached_until = c.cached_until;
    batch.chunks.back().history = c.history;
  }
  batch.local_logits = argmax_only(plan);
  batch.want_taps = plan.keep_taps;
  ForwardOutput out;
  out.logits.swap(logits_);
  DSV4_RETURN_IF_ERROR(model_->forward(batch, &out, plan.keep_hidden));
  hidden_ = std::move(out.hidden);
  taps_ = std::move(out.taps);
  hidden_row_begin_ = std::move(row_begin);
  GroupResult result = logit_results(out, static_cast<int64_t>(batch.logit_row_indices().size()), batch.local_logits);
  logits_.swap(out.logits);
  return result;
}

// The MTP block continues the kept rows of the step's forward (row i of a
// job: the main model's streams at position start + i with the token at
// start + i + 1), then drafts greedily: each further step feeds the block
// its own output streams and its last draft, one row per job.
StatusOr<GroupResult> RankWorker::draft(const StepPlan& plan) {
  const ModelConfig& c = model_->config();
  const int64_t flat = static_cast<int64_t>(c.hc_mult) * c.dim;
  std::vector<const PlannedChunk*> jobs;
  for (const PlannedChunk& job : plan.chunks)
    if (job.group == group_) jobs.push_back(&job);

  ForwardBatch batch;
  std::vector<std::unique_ptr<PagedSequenceCache>> caches;
  std::vector<float> hidden;
  for (const PlannedChunk* job : jobs) {
    const int64_t n = static_cast<int64_t>(job->tokens.size());
    const int64_t from = job->source >= 0 && job->source < static_cast<int64_t>(hidden_row_begin_.size())
                             ? hidden_row_begin_[job->source]
                             : -1;
    if (from < 0 || (from + n) * flat > static_cast<int64_t>(hidden_.size()))
      return internal_error("a draft job names rows the step's forward did not keep");
    hidden.insert(hidden.end(), hidden_.begin() + from * flat, hidden_.begin() + (from + n) * flat);
    caches.push_back(std::make_unique<PagedSequenceCache>(store_, &job->pages, job->start));
    batch.add(caches.back().get(), job->tokens.data(), n, job->prefill_len, job->drafts > 0 ? 1 : 0);
    batch.chunks.back().keep_all_window_rows = plan.keep_raw_kv;
    batch.chunks.back().cached_until = job->cached_until;
  }
  batch.local_logits = true;
  // Every rank takes the same number of MTP steps (the routed experts span
  // the groups): the most any job of the plan drafts.
  int32_t most = 0;
  for (const PlannedChunk& job : plan.chunks) most = std::max(most, job.drafts);
  ForwardOutput out;
  DSV4_RETURN_IF_ERROR(model_->forward_mtp(0, batch, hidden.data(), &out, most > 1));

  GroupResult result;
  std::vector<int64_t> drafting;  // jobs still drafting, by index into jobs/result
  std::vector<int64_t> last_row;  // their last row in the previous MTP forward
  for (size_t j = 0; j < jobs.size(); ++j) {
    if (jobs[j]->drafts <= 0) continue;
    drafting.push_back(static_cast<int64_t>(j));
    last_row.push_back(batch.chunks[j].row_begin + batch.chunks[j].num_tokens - 1);
    result.emplace_back();
  }
  std::vector<int64_t> slot(jobs.size(), -1);  // job -> its result
  for (size_t k = 0; k < drafting.size(); ++k) slot[drafting[k]] = static_cast<int64_t>(k);

  for (int32_t step = 1;; ++step) {
    GroupResult best = logit_results(out, static_cast<int64_t>(drafting.size()), true);
    std::vector<int64_t> next, next_last;
    ForwardBatch more;
    std::vector<float> more_hidden;
    for (size_t k = 0; k < drafting.size(); ++k) {
      const int64_t j = drafting[k];
      result[slot[j]].drafts.push_back(best[k].argmax);
      if (jobs[j]->drafts <= step) continue;
      more.add(caches[j].get(), &result[slot[j]].drafts.back(), 1, jobs[j]->prefill_len, 1);
      more_hidden.insert(more_hidden.end(), out.hidden.begin() + last_row[k] * flat,
                         out.hidden.begin() + (last_row[k] + 1) * flat);
      next.push_back(j);
      next_last.push_back(static_cast<int64_t>(next_last.size()));
    }
    if (step >= most) break;
    more.local_logits = true;
    ForwardOutput more_out;
    DSV4_RETURN_IF_ERROR(model_->forward_mtp(0, more, more_hidden.data(), &more_out, true));
    out = std::move(more_out);
    drafting = std::move(next);
    last_row = std::move(next_last);
  }
  return result;
}

// DSpark: each job's rows are committed positions start.. of its request,
// their taps kept by the step's forward. Every row goes into the request's
// rings (window rows of the stages' cache layers in its pages); a drafting
// job's last row is the draft call's (position p, anchor the token at
// p + 1, which the call writes itself).
StatusOr<GroupResult> RankWorker::draft_dspark(const StepPlan& plan) {
  const ModelConfig& c = model_->config();
  const int64_t width = int64_t{c.dspark_taps()} * c.dim;
  std::vector<DSparkCall> calls;
  std::vector<std::unique_ptr<PagedSequenceCache>> caches;
  std::vector<int32_t> wanted;  // drafts each call's job asked for
  std::vector<std::mt19937_64> rngs;
  rngs.reserve(plan.chunks.size());  // calls point at them
  for (const PlannedChunk& job : plan.chunks) {
    if (job.group != group_) continue;
    const int64_t n = static_cast<int64_t>(job.tokens.size());
    const int64_t from = job.source >= 0 && job.source < static_cast<int64_t>(hidden_row_begin_.size())
                             ? hidden_row_begin_[job.source]
                             : -1;
    if (from < 0 || (from + n) * width > static_cast<int64_t>(taps_.size()))
      return internal_error("a DSpark job names rows the step's forward did not keep");
    caches.push_back(std::make_unique<PagedSequenceCache>(store_, &job.pages, job.start));
    // Rows the rings will read: the window ending at the job's last
    // position (the pages hold no more unless a prefix cache keeps blocks),
    // but not the rows pages shared with the prefix cache hold already.
    const int64_t first = std::clamp<int64_t>(
        std::max(plan.keep_raw_kv ? 0 : n - c.window_size, job.cached_until - job.start), 0, n);
    const int64_t fill = (job.drafts > 0 ? n - 1 : n) - first;
    if (fill > 0)
      DSV4_RETURN_IF_ERROR(model_->dspark_fill(caches.back().get(), &taps_[(from + first) * width], fill,
                                               job.start + first, plan.keep_raw_kv, nullptr));
    if (job.drafts <= 0) continue;
    DSparkCall call;
    call.cache = caches.back().get();
    call.position = job.start + n - 1;
    call.anchor = job.tokens[n - 1];
    call.tap = &taps_[(from + n - 1) * width];
    call.temperature = job.draft_temperature;
    rngs.emplace_back(job.draft_seed);
    call.rng = &rngs.back();
    calls.push_back(call);
    wanted.push_back(job.drafts);
  }
  // One drafter forward on every rank, calls or not (the stages' routed
  // experts span the groups).
  std::vector<DSparkDraft> drafted;
  DSV4_RETURN_IF_ERROR(model_->dspark_draft(calls, &drafted, false));
  const int64_t vocab = c.vocab_size;
  GroupResult result(calls.size());
  for (size_t i = 0; i < calls.size(); ++i) {
    const DSparkDraft& d = drafted[i];
    result[i].drafts.assign(d.ids.begin() + 1, d.ids.begin() + 1 + wanted[i]);
    result[i].draft_confidence.assign(d.confidence.begin(), d.confidence.begin() + wanted[i]);
    if (calls[i].temperature > 0.0f) result[i].draft_logits.assign(d.logits.begin(), d.logits.begin() + wanted[i] * vocab);
  }
  return result;
}

}  // namespace dsv4
