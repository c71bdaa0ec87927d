// What a tile of parallel work reads, for the machine simulator (`dsv4
// bench --simulate`): the callers of the weight kernels report the bytes of
// weights each call streams and where they are, and the in-process
// collectives the bytes they copy. Nothing is counted unless a
// simulated pool installed a meter on this thread; then one thread-local
// load and a branch per kernel call.
#pragma once

#include <cstdint>

namespace dsv4 {

class WorkMeter {
 public:
  virtual ~WorkMeter() = default;
  // `bytes` of weights read starting at `at`.
  virtual void read(const void* at, int64_t bytes) = 0;
  // Activations a collective copied: `local` bytes of this rank's memory
  // read or written, and `peer` bytes read from other ranks' buffers (on a
  // machine of one rank a node, across the link between nodes).
  virtual void moved(int64_t /*local*/, int64_t /*peer*/) {}

  // The meter of the tile running on this thread, else the process's
  // (ProcessScope), or null.
  static WorkMeter* current();
  // Installs `meter` for this thread until the scope ends.
  class Scope {
   public:
    explicit Scope(WorkMeter* meter);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    WorkMeter* previous_;
  };
  // Installs `meter` for every thread without one of its own (a real
  // pool's workers included) until the scope ends: dsv4 bench counts the
  // weight bytes a step reads. `meter` takes calls from many threads.
  class ProcessScope {
   public:
    explicit ProcessScope(WorkMeter* meter);
    ~ProcessScope();
    ProcessScope(const ProcessScope&) = delete;
    ProcessScope& operator=(const ProcessScope&) = delete;

   private:
    WorkMeter* previous_;
  };
};

// CPU seconds the calling thread has run (what a simulated tile cost).
double thread_cpu_seconds();

inline void meter_read(const void* at, int64_t bytes) {
  if (WorkMeter* m = WorkMeter::current()) m->read(at, bytes);
}

inline void meter_moved(int64_t local, int64_t peer) {
  if (WorkMeter* m = WorkMeter::current()) m->moved(local, peer);
}

}  // namespace dsv4
