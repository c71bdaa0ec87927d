#include "model/expert_dispatch.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include "base/check.h"
#include "base/scratch.h"
#include "base/thread_pool.h"

namespace dsv4 {
namespace {

// One slot on its way to the rank holding its expert: the header, padded
// so that the row after it keeps the buffer's 64-byte alignment (an
// expert with one row reads it where it arrived).
struct SlotHeader {
  int32_t expert;
  float weight;
};
constexpr int64_t kHeaderBytes = 64;

}  // namespace

RunExperts one_expert_at_a_time(RunExpert run) {
  return [run = std::move(run)](const std::vector<ExpertRows>& experts) {
    auto run_one = [&](const ExpertRows& e) { run(e.expert, e.x, e.n, e.row_weights, e.y); };
    const int64_t n = static_cast<int64_t>(experts.size());
    if (n >= 2 * ThreadPool::current().num_threads()) {
      parallel_for(n, 1, [&](int64_t a, int64_t b) {
        for (int64_t i = a; i < b; ++i) run_one(experts[i]);
      });
    } else {
      for (const ExpertRows& e : experts) run_one(e);
    }
  };
}

namespace {

// Runs the experts: those with one row already read it and write its output
// in place (experts[i].x and .y set); the others' `packed` rows are copied
// side by side (expert order), packed row i from input(i), and their
// outputs copied back, packed row i's to output(i).
template <class Input, class Output>
void run_with_rows_packed(std::vector<ExpertRows>& experts, int64_t packed, int64_t dim, const RunExperts& run,
                          Input input, Output output) {
  ScratchVector<float> xin(packed * dim), yout(packed * dim);
  for (int64_t i = 0, row = 0; i < static_cast<int64_t>(experts.size()); ++i) {
    if (experts[i].n == 1) continue;
    experts[i].x = xin.data() + row * dim;
    experts[i].y = yout.data() + row * dim;
    row += experts[i].n;
  }
  parallel_for(packed, 64, [&](int64_t a, int64_t b) {
    for (int64_t i = a; i < b; ++i) std::copy_n(input(i), dim, &xin[i * dim]);
  });
  run(experts);
  parallel_for(packed, 64, [&](int64_t a, int64_t b) {
    for (int64_t i = a; i < b; ++i) std::copy_n(&yout[i * dim], dim, output(i));
  });
}

// One rank holding every expert: each expert's slots, in slot order (the
// order the packed path's arrival gives), straight from x into its rows and
// from its outputs into slots_out, with nothing packed or sent. A 4K
// prefill chunk's six slots a token would otherwise be copied three more
// times over (hundreds of MiB a layer).
void run_local_expert_slots(const ExpertSlots& s, const float* x, int64_t dim, const RunExperts& run,
                            float* slots_out) {
  const int64_t k = s.k, n_slots = s.rows * k;
  std::vector<int64_t> first(s.num_experts + 1, 0);  // of each expert's slots in `slot`
  for (int64_t i = 0; i < n_slots; ++i) {
    DSV4_CHECK_MSG(s.experts[i] >= 0 && s.experts[i] < s.num_experts, "a slot for expert %d of %d", s.experts[i],
                   s.num_experts);
    ++first[s.experts[i] + 1];
  }
  for (int e = 0; e < s.num_experts; ++e) first[e + 1] += first[e];
  std::vector<int64_t> slot(n_slots), next(first.begin(), first.end() - 1);
  std::vector<float> weights(n_slots);
  for (int64_t i = 0; i < n_slots; ++i) {
    const int64_t at = next[s.experts[i]]++;
    slot[at] = i;
    weights[at] = s.weights[i];
  }
  // An expert with one row (most of them at decode) reads it in x and
  // writes its slot of slots_out; the others' rows are packed.
  std::vector<int64_t> packed;  // of each packed row, its place in `slot`
  std::vector<ExpertRows> experts;
  for (int e = 0; e < s.num_experts; ++e) {
    const int64_t n = first[e + 1] - first[e];
    if (n == 0) continue;
    experts.push_back({e, nullptr, n, weights.data() + first[e], nullptr});
    if (n == 1) {
      experts.back().x = x + slot[first[e]] / k * dim;
      experts.back().y = slots_out + slot[first[e]] * dim;
    } else {
      for (int64_t j = first[e]; j < first[e + 1]; ++j) packed.push_back(j);
    }
  }
  run_with_rows_packed(
      experts, static_cast<int64_t>(packed.size()), dim, run,
      [&](int64_t i) { return x + slot[packed[i]] / k * dim; },
      [&](int64_t i) { return slots_out + slot[packed[i]] * dim; });
}

}  // namespace

void run_expert_slots(const ExpertSlots& s, const float* x, int64_t dim, Collectives* ep, const RunExperts& run,
                      float* slots_out) {
  const int64_t k = s.k, n_slots = s.rows * k;
  const int ranks = ep ? ep->size() : 1;
  if (ranks == 1) return run_local_expert_slots(s, x, dim, run, slots_out);
  const ExpertShard shard{ep ? ep->rank() : 0, ranks};
  const int per_rank = s.num_experts / ranks;
  // Pack each destination's slots, in slot order: header then the row.
  const int64_t record = kHeaderBytes + sizeof(float) * dim;
  std::vector<std::vector<int64_t>> to(ranks);
  for (int64_t i = 0; i < n_slots; ++i) to[s.experts[i] / per_rank].push_back(i);
  std::vector<size_t> send_bytes(ranks), recv_bytes(ranks), count_bytes(ranks, sizeof(int64_t));
  std::vector<int64_t> send_counts(ranks), recv_counts(ranks);
  std::vector<int64_t> order;  // slots by destination, each destination's in slot order
  for (int r = 0; r < ranks; ++r) {
    send_counts[r] = static_cast<int64_t>(to[r].size());
    send_bytes[r] = send_counts[r] * record;
    order.insert(order.end(), to[r].begin(), to[r].end());
  }
  ScratchVector<char> send(n_slots * record);
  parallel_for(n_slots, 64, [&](int64_t a, int64_t b) {
    for (int64_t j = a; j < b; ++j) {
      const int64_t i = order[j];
      char* at = send.data() + j * record;
      const SlotHeader hdr{s.experts[i], s.weights[i]};
      std::memcpy(at, &hdr, sizeof hdr);
      std::memcpy(at + kHeaderBytes, x + i / k * dim, sizeof(float) * dim);
    }
  });
  ScratchVector<char> recv;
  if (ranks > 1) {
    ep->all_to_all_v(send_counts.data(), count_bytes, recv_counts.data(), count_bytes);
    int64_t total = 0;
    for (int r = 0; r < ranks; ++r) total += recv_counts[r], recv_bytes[r] = recv_counts[r] * record;
    recv.resize(total * record);
    ep->all_to_all_v(send.data(), send_bytes, recv.data(), recv_bytes);
  } else {
    recv_counts = send_counts;
    recv = std::move(send);
  }
  // Each expert this rank holds, over the slots it received, in arrival order.
  const int64_t got = static_cast<int64_t>(recv.size()) / record;
  ScratchVector<float> results(got * dim);
  std::vector<std::vector<int64_t>> mine(s.num_experts);
  std::vector<std::vector<float>> wts(s.num_experts);
  for (int64_t i = 0; i < got; ++i) {
    SlotHeader hdr;
    std::memcpy(&hdr, &recv[i * record], sizeof hdr);
    DSV4_CHECK_MSG(hdr.expert >= 0 && hdr.expert < s.num_experts && shard.owns(hdr.expert, s.num_experts),
                   "a slot for expert %d reached a rank that does not hold it", hdr.expert);
    mine[hdr.expert].push_back(i);
    wts[hdr.expert].push_back(hdr.weight);
  }
  // Each expert's rows side by side (expert order, arrival order within).
  // An expert with one row (most of them at decode) reads it where it
  // arrived and writes its output where the output leaves from.
  auto arrived = [&](int64_t i) { return reinterpret_cast<const float*>(&recv[i * record + kHeaderBytes]); };
  std::vector<int64_t> arrival;  // received slot of each packed row
  std::vector<ExpertRows> experts;
  for (int e = 0; e < s.num_experts; ++e) {
    if (mine[e].empty()) continue;
    const auto n = static_cast<int64_t>(mine[e].size());
    experts.push_back({e, nullptr, n, wts[e].data(), nullptr});
    if (n == 1) {
      experts.back().x = arrived(mine[e][0]);
      experts.back().y = &results[mine[e][0] * dim];
    } else {
      arrival.insert(arrival.end(), mine[e].begin(), mine[e].end());
    }
  }
  run_with_rows_packed(
      experts, static_cast<int64_t>(arrival.size()), dim, run, [&](int64_t i) { return arrived(arrival[i]); },
      [&](int64_t i) { return &results[arrival[i] * dim]; });
  // Outputs travel back the way their slots came.
  ScratchVector<float> back;
  if (ranks > 1) {
    std::vector<size_t> out_bytes(ranks), in_bytes(ranks);
    for (int r = 0; r < ranks; ++r) {
      out_bytes[r] = sizeof(float) * recv_counts[r] * dim;
      in_bytes[r] = sizeof(float) * send_counts[r] * dim;
    }
    back.resize(n_slots * dim);
    ep->all_to_all_v(results.data(), out_bytes, back.data(), in_bytes);
  } else {
    back = std::move(results);
  }
  parallel_for(n_slots, 64, [&](int64_t a, int64_t b) {
    for (int64_t j = a; j < b; ++j) std::copy_n(&back[j * dim], dim, slots_out + order[j] * dim);
  });
}

void sum_slots_in_expert_order(const ExpertSlots& s, const float* slots_out, int64_t dim, float* out) {
  const int64_t k = s.k;
  // A task a piece of a row (each value adds its own slots' values).
  parallel_for_pieces(s.rows, dim, 512, 1, [&](int64_t r, int64_t d0, int64_t d1) {
    thread_local std::vector<int64_t> order;
    order.resize(k);
    std::fill(out + r * dim + d0, out + r * dim + d1, 0.0f);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return s.experts[r * k + a] < s.experts[r * k + b]; });
    for (int64_t j : order)
      for (int64_t d = d0; d < d1; ++d) out[r * dim + d] += slots_out[(r * k + j) * dim + d];
  });
}

}  // namespace dsv4
