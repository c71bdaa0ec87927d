#include "runtime/rank_worker.h"

#include <algorithm>
#include <memory>

#include "dist/vocab_argmax.h"
#include "kv/kv_cache_manager.h"

namespace dsv4 {

StatusOr<GroupResult> RankWorker::execute(const StepPlan& plan) {
  ForwardBatch batch;
  std::vector<std::unique_ptr<PagedSequenceCache>> caches;
  std::vector<int64_t> sampling;  // batch chunk index of each sampling chunk
  for (const PlannedChunk& c : plan.chunks) {
    if (c.group != group_) continue;
    caches.push_back(std::make_unique<PagedSequenceCache>(store_, &c.pages, c.start));
    if (c.start == 0) caches.back()->reset_states();  // a fresh (or recomputed) sequence
    if (c.samples) sampling.push_back(static_cast<int64_t>(batch.chunks.size()));
    batch.add(caches.back().get(), c.tokens.data(), static_cast<int64_t>(c.tokens.size()), c.prefill_len);
  }
  const bool argmax_only = group_ < static_cast<int>(plan.argmax_only.size()) && plan.argmax_only[group_];
  batch.local_logits = argmax_only;
  ForwardOutput out;
  DSV4_RETURN_IF_ERROR(model_->forward(batch, &out));

  const int64_t part = out.vocab_size, vocab = model_->config().vocab_size;
  GroupResult result(sampling.size());
  if (argmax_only) {
    std::vector<float> rows(sampling.size() * part);
    for (size_t i = 0; i < sampling.size(); ++i)
      std::copy_n(&out.logits[sampling[i] * part], part, &rows[i * part]);
    std::vector<int32_t> best(sampling.size());
    if (part != vocab) {
      sharded_argmax(*tp_, rows.data(), static_cast<int64_t>(sampling.size()), part, out.vocab_begin, best.data());
    } else {
      for (size_t i = 0; i < sampling.size(); ++i)
        best[i] = static_cast<int32_t>(std::max_element(&rows[i * part], &rows[(i + 1) * part]) - &rows[i * part]);
    }
    for (size_t i = 0; i < sampling.size(); ++i) result[i].argmax = best[i];
  } else {
    for (size_t i = 0; i < sampling.size(); ++i)
      result[i].logits.assign(&out.logits[sampling[i] * vocab], &out.logits[(sampling[i] + 1) * vocab]);
  }
  if (!leader()) result.clear();
  return result;
}

}  // namespace dsv4
