#include "base/phase_timer.h"

#include <atomic>
#include <chrono>

namespace dsv4 {
namespace {

std::atomic<bool> g_enabled{false};
std::array<std::atomic<int64_t>, kNumPhases> g_ns{};
thread_local int64_t t_child_ns = 0;
thread_local Phase t_phase = Phase::kOther;
thread_local PhaseListener* t_listener = nullptr;  // time of the scopes inside the current one

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
    case Phase::kExperts: return "experts";
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

Phase PhaseTimer::current() { return t_phase; }

PhaseListener* PhaseTimer::listen(PhaseListener* listener) {
  PhaseListener* previous = t_listener;
  t_listener = listener;
  return previous;
}

PhaseTimer::Scope::Scope(Phase phase) : phase_(phase), previous_(t_phase), on_(enabled()) {
  if (t_listener && phase != t_phase) t_listener->phase_changes(t_phase, phase);
  t_phase = phase;
  if (!on_) return;
  start_ns_ = now_ns();
  saved_child_ns_ = t_child_ns;
  t_child_ns = 0;
}

PhaseTimer::Scope::~Scope() {
  if (t_listener && phase_ != previous_) t_listener->phase_changes(phase_, previous_);
  t_phase = previous_;
  if (!on_) return;
  const int64_t total = now_ns() - start_ns_;
  g_ns[static_cast<int>(phase_)].fetch_add(total - t_child_ns, std::memory_order_relaxed);
  t_child_ns = saved_child_ns_ + total;
}

}  // namespace dsv4
