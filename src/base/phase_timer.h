// Where a forward spends its time, by phase of the model, for `dsv4 bench`'s
// breakdown: a scope adds its wall time, less the time of the scopes inside
// it, to its phase. Off unless enabled (then two clock reads per scope);
// phases are counted for the whole process (bench runs one rank).
#pragma once

#include <array>
#include <cstdint>

namespace dsv4 {

enum class Phase {
  kAttention,        // projections, RoPE, the attention kernels, the output projections
  kIndexer,          // the lightning indexer's queries, scores and top-k
  kCompressor,       // KV compression
  kExperts,          // routing, the routed experts and the shared expert (one set of jobs)
  kHead,             // embedding, the hc head, the final norm and the vocabulary projection
  kHyperConnections, // mHC mixing (Sinkhorn) and the norms
  kSampling,
  kGrammar,          // constrained decoding: grammar masks and advancing the automata
  kCommunication,    // collectives between ranks
  kOther,
};
inline constexpr int kNumPhases = static_cast<int>(Phase::kOther) + 1;
const char* phase_name(Phase p);

// Told on this thread when the phase changes (the machine simulator's
// ranks, to charge the time between events to the phase it was spent in).
class PhaseListener {
 public:
  virtual ~PhaseListener() = default;
  virtual void phase_changes(Phase from, Phase to) = 0;
};

class PhaseTimer {
 public:
  static void enable(bool on);
  static bool enabled();
  // Seconds per phase since the last reset.
  static std::array<double, kNumPhases> totals();
  static void reset();
  // The phase of the innermost scope on this thread (kOther outside any),
  // tracked whether or not timing is enabled.
  static Phase current();
  // Installs `listener` for this thread (null: none); returns the last one.
  static PhaseListener* listen(PhaseListener* listener);

  // Adds its time (less nested scopes') to `phase` when enabled.
  class Scope {
   public:
    explicit Scope(Phase phase);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Phase phase_, previous_;
    bool on_;
    int64_t start_ns_ = 0, saved_child_ns_ = 0;
  };
};

}  // namespace dsv4
