// What one forward decided about its rows, published to the layers for the
// forward's duration by a scoped guard (so the blocks read it instead of
// every signature carrying it): how the rows split over the tensor-parallel
// group, and whether FlashComm1 keeps the residual stream split by rows.
#pragma once

#include "base/check.h"
#include "model/token_split.h"

namespace dsv4 {

// FlashComm1 (sequence-parallel prefill): in prefill steps of at least
// min_tokens rows, each tensor-parallel rank holds only its block of the
// residual stream; norms, hyper-connections and gates run on the block, the
// rows are gathered before attention and the MoE, and the outputs come back
// to their blocks by an all-to-all. Never in decode-only steps, never on an
// empty group.
struct FlashCommOptions {
  bool enabled = false;
  int64_t min_tokens = 1000;
};

struct ForwardScope {
  TokenSplit split;        // the rows over the tensor-parallel group
  bool flashcomm = false;  // the residual stream is held in split blocks

  // The scope of the forward running on this thread (each rank is a thread
  // or a process, so this is per rank).
  static const ForwardScope& current() {
    DSV4_CHECK_MSG(active_ != nullptr, "no forward in progress on this thread");
    return *active_;
  }

  class Guard {
   public:
    explicit Guard(const ForwardScope& scope) : previous_(active_) { active_ = &scope; }
    ~Guard() { active_ = previous_; }
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;

   private:
    const ForwardScope* previous_;
  };

 private:
  static inline thread_local const ForwardScope* active_ = nullptr;
};

}  // namespace dsv4
