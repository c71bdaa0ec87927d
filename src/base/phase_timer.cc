#include "base/phase_timer.h"

#include <atomic>
#include <chrono>

namespace dsv4 {
namespace {

std::atomic<bool> g_enabled{false};
std::array<std::atomic<int64_t>, kNumPhases> g_ns{};
thread_local int64_t t_child_ns = 0;  // time of the scopes inside the current one

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::kAttention: return "attention";
    case Phase::kIndexer: return "indexer";
    case Phase::kCompressor: return "compressor";
    case Phase::kRoutedExperts: return "routed experts";
    case Phase::kSharedExpert: return "shared expert";
    case Phase::kHead: return "embedding + head";
    case Phase::kHyperConnections: return "mHC + norms";
    case Phase::kSampling: return "sampling";
    case Phase::kGrammar: return "grammar";
    case Phase::kCommunication: return "communication";
    case Phase::kOther: break;
  }
  return "other";
}

void PhaseTimer::enable(bool on) { g_enabled.store(on); }
bool PhaseTimer::enabled() { return g_enabled.load(std::memory_order_relaxed); }

std::array<double, kNumPhases> PhaseTimer::totals() {
  std::array<double, kNumPhases> out{};
  for (int i = 0; i < kNumPhases; ++i) out[i] = g_ns[i].load() * 1e-9;
  return out;
}

void PhaseTimer::reset() {
  for (auto& n : g_ns) n.store(0);
}

PhaseTimer::Scope::Scope(Phase phase) : phase_(phase), on_(enabled()) {
  if (!on_) return;
  start_ns_ = now_ns();
  saved_child_ns_ = t_child_ns;
  t_child_ns = 0;
}

PhaseTimer::Scope::~Scope() {
  if (!on_) return;
  const int64_t total = now_ns() - start_ns_;
  g_ns[static_cast<int>(phase_)].fetch_add(total - t_child_ns, std::memory_order_relaxed);
  t_child_ns = saved_child_ns_ + total;
}

}  // namespace dsv4
