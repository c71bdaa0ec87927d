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

// What a rank sends each rank holding experts its slots chose: a header a
// slot, then each row those slots read, once. A decode row's six slots
// mostly go to fewer ranks than six; sent a copy a slot, the row travelled
// (and was copied on the rank's thread) up to six times.
struct SlotHeader {
  int32_t expert;
  float weight;
  int32_t row;  // among the rows of its message
  int32_t unused;
};
// A message's headers take whole 64-byte lines, so the rows after them keep
// the buffer's alignment (an expert with one row reads it where it arrived).
int64_t header_bytes(int64_t slots) { return (slots * static_cast<int64_t>(sizeof(SlotHeader)) + 63) / 64 * 64; }
// Slots and rows of one message, exchanged before the messages.
struct MessageCounts {
  int64_t slots = 0, rows = 0;
  size_t bytes(int64_t dim) const { return static_cast<size_t>(header_bytes(slots) + rows * dim * static_cast<int64_t>(sizeof(float))); }
};

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
  parallel_copy(packed, dim, input, [&](int64_t i) { return &xin[i * dim]; });
  run(experts);
  parallel_copy(packed, dim, [&](int64_t i) { return &yout[i * dim]; }, output);
}

// One rank holding every expert: each expert's slots, in slot order (the
// order the packed path's arrival gives), straight from x into its rows and
// from its outputs into slots_out, with nothing packed or sent. A 4K
// prefill chunk's six slots a token would otherwise be copied three more
// times over (hundreds of MiB a layer).
void run_local_expert_slots(const ExpertSlots& s, const float* x, int64_t dim, const RunExperts& run,
                            SlotOutputs* outputs) {
  const int64_t k = s.k, n_slots = s.rows * k;
  outputs->rows.resize(n_slots * dim);
  float* slots_out = outputs->rows.data();
  outputs->of_slot.resize(n_slots);
  for (int64_t i = 0; i < n_slots; ++i) outputs->of_slot[i] = slots_out + i * dim;
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
                      SlotOutputs* outputs) {
  const int64_t k = s.k, n_slots = s.rows * k;
  const int ranks = ep ? ep->size() : 1;
  if (ranks == 1) return run_local_expert_slots(s, x, dim, run, outputs);
  const ExpertShard shard{ep->rank(), ranks};
  const int per_rank = s.num_experts / ranks;
  // Each destination's slots in slot order, and the rows they read in the
  // order they first appear (a row's slots are neighbours in slot order).
  std::vector<std::vector<int64_t>> to(ranks), rows_to(ranks);
  std::vector<int32_t> row_in_message(n_slots);
  for (int64_t i = 0; i < n_slots; ++i) {
    const int r = s.experts[i] / per_rank;
    to[r].push_back(i);
    if (rows_to[r].empty() || rows_to[r].back() != i / k) rows_to[r].push_back(i / k);
    row_in_message[i] = static_cast<int32_t>(rows_to[r].size() - 1);
  }
  const size_t row_bytes = sizeof(float) * dim;
  std::vector<MessageCounts> send_counts(ranks), recv_counts(ranks);
  std::vector<size_t> send_bytes(ranks), recv_bytes(ranks), count_bytes(ranks, sizeof(MessageCounts));
  std::vector<int64_t> order;       // slots by destination, each destination's in slot order
  std::vector<int64_t> message_at;  // byte offset of each destination's message
  std::vector<std::pair<float*, int64_t>> row_copies;  // (where, source row) of every row sent
  size_t sent = 0;
  for (int r = 0; r < ranks; ++r) {
    send_counts[r] = {static_cast<int64_t>(to[r].size()), static_cast<int64_t>(rows_to[r].size())};
    send_bytes[r] = send_counts[r].bytes(dim);
    message_at.push_back(static_cast<int64_t>(sent));
    sent += send_bytes[r];
    order.insert(order.end(), to[r].begin(), to[r].end());
  }
  ScratchVector<char> send(sent);
  for (int r = 0; r < ranks; ++r) {
    char* at = send.data() + message_at[r];
    for (size_t j = 0; j < to[r].size(); ++j) {
      const int64_t i = to[r][j];
      const SlotHeader hdr{s.experts[i], s.weights[i], row_in_message[i], 0};
      std::memcpy(at + j * sizeof(SlotHeader), &hdr, sizeof hdr);
    }
    // Rows start on 64-byte lines (header_bytes), so they are floats in place.
    auto* rows = reinterpret_cast<float*>(at + header_bytes(send_counts[r].slots));
    for (size_t j = 0; j < rows_to[r].size(); ++j) row_copies.emplace_back(rows + j * dim, rows_to[r][j]);
  }
  parallel_copy(
      static_cast<int64_t>(row_copies.size()), dim, [&](int64_t j) { return x + row_copies[j].second * dim; },
      [&](int64_t j) { return row_copies[j].first; });
  ep->all_to_all_v(send_counts.data(), count_bytes, recv_counts.data(), count_bytes);
  size_t received = 0;
  for (int r = 0; r < ranks; ++r) received += recv_bytes[r] = recv_counts[r].bytes(dim);
  ScratchVector<char> recv(received);
  ep->all_to_all_v(send.data(), send_bytes, recv.data(), recv_bytes);
  // Each received slot's expert, weight and row, in arrival order.
  std::vector<const float*> slot_row;
  std::vector<std::vector<int64_t>> mine(s.num_experts);
  std::vector<std::vector<float>> wts(s.num_experts);
  const char* message = recv.data();
  for (int r = 0; r < ranks; message += recv_bytes[r++]) {
    const char* rows_at = message + header_bytes(recv_counts[r].slots);
    for (int64_t j = 0; j < recv_counts[r].slots; ++j) {
      SlotHeader hdr;
      std::memcpy(&hdr, message + j * sizeof(SlotHeader), sizeof hdr);
      DSV4_CHECK_MSG(hdr.expert >= 0 && hdr.expert < s.num_experts && shard.owns(hdr.expert, s.num_experts),
                     "a slot for expert %d reached a rank that does not hold it", hdr.expert);
      DSV4_CHECK_MSG(hdr.row >= 0 && hdr.row < recv_counts[r].rows, "a slot names row %d of a message of %lld rows",
                     hdr.row, static_cast<long long>(recv_counts[r].rows));
      mine[hdr.expert].push_back(static_cast<int64_t>(slot_row.size()));
      wts[hdr.expert].push_back(hdr.weight);
      slot_row.push_back(reinterpret_cast<const float*>(rows_at + hdr.row * row_bytes));
    }
  }
  // Each expert this rank holds, over the slots it received.
  const int64_t got = static_cast<int64_t>(slot_row.size());
  ScratchVector<float> results(got * dim);
  // Each expert's rows side by side (expert order, arrival order within).
  // An expert with one row (most of them at decode) reads it where it
  // arrived and writes its output where the output leaves from.
  std::vector<int64_t> arrival;  // received slot of each packed row
  std::vector<ExpertRows> experts;
  for (int e = 0; e < s.num_experts; ++e) {
    if (mine[e].empty()) continue;
    const auto n = static_cast<int64_t>(mine[e].size());
    experts.push_back({e, nullptr, n, wts[e].data(), nullptr});
    if (n == 1) {
      experts.back().x = slot_row[mine[e][0]];
      experts.back().y = &results[mine[e][0] * dim];
    } else {
      arrival.insert(arrival.end(), mine[e].begin(), mine[e].end());
    }
  }
  run_with_rows_packed(
      experts, static_cast<int64_t>(arrival.size()), dim, run, [&](int64_t i) { return slot_row[arrival[i]]; },
      [&](int64_t i) { return &results[arrival[i] * dim]; });
  // Outputs travel back the way their slots came, one a slot, and stay
  // where they arrive.
  std::vector<size_t> out_bytes(ranks), in_bytes(ranks);
  for (int r = 0; r < ranks; ++r) {
    out_bytes[r] = row_bytes * recv_counts[r].slots;
    in_bytes[r] = row_bytes * send_counts[r].slots;
  }
  outputs->rows.resize(n_slots * dim);
  ep->all_to_all_v(results.data(), out_bytes, outputs->rows.data(), in_bytes);
  outputs->of_slot.resize(n_slots);
  for (int64_t j = 0; j < n_slots; ++j) outputs->of_slot[order[j]] = &outputs->rows[j * dim];
}

void sum_slots_in_expert_order(const ExpertSlots& s, const SlotOutputs& outputs, int64_t dim, float* out) {
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
      for (int64_t d = d0; d < d1; ++d) out[r * dim + d] += outputs.of_slot[r * k + j][d];
  });
}

}  // namespace dsv4
