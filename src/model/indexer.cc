#include "model/indexer.h"

#include <algorithm>
#include <cmath>

#include "base/scratch.h"
#include "base/thread_pool.h"
#include "kernels/kernels.h"
#include "ops/topk.h"

namespace dsv4 {
namespace {

// Keys a scoring task takes. A decode step has one query row and up to
// thousands of keys: split by rows alone it would be one task. A multiple
// of the kernels' key tile, and each key's dots are their own lanes, so a
// score does not depend on where its keys were cut.
constexpr int64_t kKeyBlock = 8 * kernels::kKeyTile;
// With a task a row for every thread already, wider blocks: each task
// readies its row's query for the kernel once (head_dots_fast encodes it).
constexpr int64_t kWideKeyBlock = 64 * kernels::kKeyTile;

// Floats one pass over the query rows holds (the scores, and under tensor
// parallelism the gathered per-head terms): a long prompt's chunk would
// otherwise hold [rows, keys, heads] at once, gigabytes at 8K rows.
constexpr int64_t kFloatsPerPass = int64_t{64} << 20;

// A scoring task: one query row against a block of its keys.
struct ScoreTask {
  int64_t row, key_begin, key_end;
};

// A query row: row i of a sequence's rows.
struct QueryRow {
  const IndexerRows* seq;
  int64_t i;
  int64_t pos() const { return seq->start_pos + i; }
};

// Scores a span of the query rows and ranks each row's keys.
class Pass {
 public:
  Pass(const kernels::Kernels& k, const IndexerShape& s, Collectives* tp)
      : k_(k), s_(s), tp_(tp), ranks_(tp ? tp->size() : 1) {}

  // Floats a row holds in a pass.
  int64_t floats_of(const QueryRow& row) const {
    return visible(row) * (1 + (ranks_ > 1 ? s_.heads * (ranks_ + 1) : 0));
  }

  // Each of `rows`' choice to its sequence's selected rows.
  void run(const std::vector<QueryRow>& rows) {
    rows_ = &rows;
    const auto n = static_cast<int64_t>(rows.size());
    offset_.assign(n + 1, 0);
    std::vector<ScoreTask> tasks;
    const int64_t block = n >= ThreadPool::current().num_threads() ? kWideKeyBlock : kKeyBlock;
    for (int64_t r = 0; r < n; ++r) {
      const int64_t v = visible(rows[r]);
      offset_[r + 1] = offset_[r] + v;
      for (int64_t j = 0; j < v; j += block) tasks.push_back({r, j, std::min(v, j + block)});
    }
    // Resized from empty: a pass never copies the last pass's values.
    score_.clear();
    score_.resize(offset_.back());
    const auto num_tasks = static_cast<int64_t>(tasks.size());
    if (ranks_ == 1) {
      parallel_for(num_tasks, 1, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) score_own(tasks[t]);
      });
    } else {
      terms_.clear();
      terms_.resize(offset_.back() * s_.heads);
      parallel_for(num_tasks, 1, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t)
          terms_of(tasks[t], terms_.data() + term_index(tasks[t].row, tasks[t].key_begin));
      });
      gathered_.clear();
      gathered_.resize(terms_.size() * ranks_);
      tp_->all_gather(terms_.data(), sizeof(float) * terms_.size(), gathered_.data());
      parallel_for(num_tasks, 1, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) add_gathered(tasks[t]);
      });
    }
    parallel_for(n, 1, [&](int64_t r0, int64_t r1) {
      std::vector<float> ranked_scores;
      for (int64_t r = r0; r < r1; ++r) rank(r, &ranked_scores);
    });
  }

 private:
  int64_t visible(const QueryRow& row) const { return (row.pos() + 1) / s_.ratio; }
  int64_t term_index(int64_t row, int64_t key) const { return (offset_[row] + key) * s_.heads; }

  // Per head h of key j: relu(q_h . k_j) * weight_h, at t[(j - key_begin) * heads + h].
  void terms_of(const ScoreTask& task, float* t) const {
    thread_local ScratchVector<float> scratch;
    scratch.resize(kernels::head_dots_scratch(s_.heads, s_.head_dim));
    const QueryRow& row = (*rows_)[task.row];
    const int64_t n = task.key_end - task.key_begin;
    k_.head_dots(row.seq->q + row.i * s_.heads * s_.head_dim, s_.heads, row.seq->keys + task.key_begin, n,
                 s_.head_dim, scratch.data(), t);
    const float* w = row.seq->weights + row.i * s_.heads;
    for (int64_t j = 0; j < n; ++j)
      for (int h = 0; h < s_.heads; ++h) t[j * s_.heads + h] = std::max(t[j * s_.heads + h], 0.0f) * w[h];
  }

  // One rank holds every head: a key's score is its terms added in head order.
  void score_own(const ScoreTask& task) {
    thread_local ScratchVector<float> t;
    t.resize((task.key_end - task.key_begin) * s_.heads);
    terms_of(task, t.data());
    add_in_head_order(t.data(), 0, 1, task.key_end - task.key_begin, score_.data() + offset_[task.row] + task.key_begin);
  }

  // The ranks' terms added in global head order: rank-major blocks.
  void add_gathered(const ScoreTask& task) {
    add_in_head_order(gathered_.data() + term_index(task.row, task.key_begin), static_cast<int64_t>(terms_.size()),
                      ranks_, task.key_end - task.key_begin, score_.data() + offset_[task.row] + task.key_begin);
  }

  // score[j] = the terms of key j added from 0 in order, rank by rank and
  // head by head; the terms of rank r, key j, head h at
  // t[r * rank_stride + j * heads + h]. Up to kKeysAtOnce keys' sums go
  // side by side, each its own chain (one key at a time, every add waited
  // on the one before: the 16K-context chunk's indexer took 940 ms, 835
  // after).
  void add_in_head_order(const float* t, int64_t rank_stride, int ranks, int64_t keys, float* score) const {
    constexpr int64_t kKeysAtOnce = 8;
    const int64_t heads = s_.heads;
    for (int64_t j = 0; j < keys; j += kKeysAtOnce) {
      const int64_t n = std::min(kKeysAtOnce, keys - j);
      float acc[kKeysAtOnce] = {};
      for (int r = 0; r < ranks; ++r) {
        const float* tr = t + r * rank_stride + j * heads;
        for (int64_t h = 0; h < heads; ++h)
          for (int64_t i = 0; i < n; ++i) acc[i] += tr[i * heads + h];
      }
      std::copy_n(acc, n, score + j);
    }
  }

  // The reference ranks a one-shot prefill's rows over all of the prompt's
  // compressed rows (the future ones at -inf), a decode step's over those
  // it sees.
  void rank(int64_t r, std::vector<float>* ranked_scores) const {
    const QueryRow& row = (*rows_)[r];
    const int64_t v = visible(row);
    const int64_t ranked = row.pos() < row.seq->prefill_len ? row.seq->prefill_len / s_.ratio : v;
    const float* score = score_.data() + offset_[r];
    ranked_scores->assign(score, score + v);
    ranked_scores->resize(ranked, -INFINITY);
    const int64_t k = std::min<int64_t>(s_.topk, ranked);
    std::vector<int32_t> top(k);
    topk_like_torch(ranked_scores->data(), ranked, k, top.data());
    std::vector<int32_t>& out = (*row.seq->selected)[row.i];
    out.clear();
    for (int32_t j : top) out.push_back(j < v ? j : -1);
  }

  const kernels::Kernels& k_;
  const IndexerShape& s_;
  Collectives* tp_;
  const int ranks_;
  const std::vector<QueryRow>* rows_ = nullptr;
  std::vector<int64_t> offset_;  // each of the pass's rows' first score
  ScratchVector<float> score_, terms_, gathered_;
};

}  // namespace

void indexer_select(const kernels::Kernels& k, const IndexerShape& s, const std::vector<IndexerRows>& seqs,
                    Collectives* tp) {
  Pass pass(k, s, tp);
  // Every rank cuts the same passes (its sequences, rows and keys are the
  // others'), so their collectives pair up.
  std::vector<QueryRow> rows;
  int64_t floats = 0;
  for (const IndexerRows& seq : seqs) {
    seq.selected->assign(seq.n, {});
    for (int64_t i = 0; i < seq.n; ++i) {
      const QueryRow row{&seq, i};
      if (!rows.empty() && floats + pass.floats_of(row) > kFloatsPerPass) {
        pass.run(rows);
        rows.clear();
        floats = 0;
      }
      rows.push_back(row);
      floats += pass.floats_of(row);
    }
  }
  if (!rows.empty()) pass.run(rows);
}

void indexer_select(const kernels::Kernels& k, const IndexerShape& s, const float* q, const float* weights,
                    const uint8_t* const* keys, int64_t start_pos, int64_t n, int64_t prefill_len, Collectives* tp,
                    std::vector<std::vector<int32_t>>* selected) {
  indexer_select(k, s, {{q, weights, keys, start_pos, n, prefill_len, selected}}, tp);
}

}  // namespace dsv4
