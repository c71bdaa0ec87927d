// A big CPU server simulated on this one by running the real code (issue:
// "proven by simulation, never by a model of it"). Each rank gets a
// simulated pool of as many logical workers as its node has cores: every
// parallel_for is split into the tiles those workers would get, the tiles
// run here one after another, and a SimulatedRank records what each cost:
// the thread CPU time it took here, and the weight bytes it streamed
// (WorkMeter) from the node they are bound to (RecordedMemoryBinding). It
// then hands a job's tiles to its logical workers in order, each to the
// worker that frees up first, as the real pool's workers take the next
// tile when they finish one.
//
// A tile's projected time on the big machine is
//   max(its CPU time here, its bytes / share + its bytes from another node / link share)
// where share is the node's bandwidth (link share: the link's) split among
// the workers the job keeps busy, at most what one core streams alone; its
// bytes are the weights it streamed and what a collective's copy moved; a job's is its busiest
// worker's total plus a job's wake-up and join cost;
// a step's is the sum of its jobs plus the rank thread's time outside jobs
// (measured here, collectives included). docs/simulation.md has the rest.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "base/phase_timer.h"
#include "base/thread_pool.h"
#include "dist/memory_binding.h"

namespace dsv4 {

struct SimulatedMachine {
  int nodes = 2;
  int cores = 128;                 // in all, cores / nodes a node
  double node_bandwidth = 400e9;   // bytes/s one node's memory streams
  double job_seconds = 0;          // one pool job's wake-up and join (measured on this machine)
  // What reading the thread CPU clock costs here: a tile's measured time,
  // and each span of the rank thread's serial time, holds about one read,
  // taken off it (tiles of a few microseconds would otherwise grow by a
  // tenth or more, and a decode token's serial time by a read for each of
  // its hundreds of jobs, phase changes and inline calls).
  double clock_seconds = 0;
  double core_peak_bandwidth = 0;  // bytes/s one core streams when alone (0: no limit)
  // Bytes/s a node reads from another (the sockets' link, each direction):
  // what a collective's copies from a rank on another node share.
  double link_bandwidth = 64e9;
  int cores_per_node() const { return cores / nodes; }
  // What each of `streaming` cores of a node gets: an equal share of the
  // node's bandwidth, at most what one core can stream.
  double share_of(int streaming) const { return split(node_bandwidth, streaming); }
  // And of the link, reading from another node.
  double link_share_of(int streaming) const { return split(link_bandwidth, streaming); }

 private:
  double split(double bandwidth, int streaming) const {
    const double share = bandwidth / std::max(1, std::min(streaming, cores_per_node()));
    return core_peak_bandwidth > 0 ? std::min(share, core_peak_bandwidth) : share;
  }
};

// One phase's parallel work and serial time over a span of steps.
struct PhaseLoad {
  int64_t jobs = 0, tiles = 0;
  // Projected seconds of all tiles, each at the bandwidth share it would
  // get were the job spread over all the rank's workers: the ideal, work
  // over workers, is then the job's time at perfect balance. (At the
  // larger share a job of fewer tiles than workers gets, a job streaming
  // at the node's bandwidth would count as unbalanced.)
  double work = 0;
  double busiest = 0;  // projected seconds of each job's busiest worker, summed over jobs
  double serial = 0;   // seconds the rank's thread spent outside jobs (measured here)
  // Weight bytes read, by where they live against the reading worker.
  double local = 0, remote = 0, unplaced = 0;
  // Bytes collectives copied on the rank's thread (small ones, not worth a
  // job), of its own memory and read from other ranks': priced, as the
  // rank's time in a collective is mostly waiting here.
  double inline_local = 0, inline_peer = 0;

  // Ideal over busiest: 1 when every worker of every job is equally busy.
  double balance(int workers) const { return busiest > 0 ? work / workers / busiest : 1.0; }
  double seconds(double job_seconds) const { return busiest + static_cast<double>(jobs) * job_seconds + serial; }
  double bytes() const { return local + remote + unplaced; }
  PhaseLoad& operator+=(const PhaseLoad& o);
};

using PhaseLoads = std::array<PhaseLoad, kNumPhases>;
PhaseLoad total_of(const PhaseLoads& loads);

// A rank's collectives over a span of steps (Communicator::traffic).
struct CollectiveLoad {
  int64_t collectives = 0;
  double bytes = 0;  // sent; a rank reads about as many from its peers
};

// Projected seconds of phase p on the machine: its jobs and serial time,
// except communication, whose serial time here is mostly waiting for the
// other ranks (which run their tiles one by one here); it is priced instead
// as two barriers a collective (each a pool job's join), the jobs its
// copies ran (their tiles timed as any tile's, their bytes at their share
// of the node and of the link), and the bytes copied on the rank's thread
// by one core (alone on its node, the others waiting).
double projected_seconds(const PhaseLoads& loads, Phase p, const SimulatedMachine& m, const CollectiveLoad& comm);
double projected_step_seconds(const PhaseLoads& loads, const SimulatedMachine& m, const CollectiveLoad& comm);

class SimulatedRank : public JobObserver {
 public:
  // A rank on NUMA node `node` of `machine` with `workers` logical workers;
  // `memory` (not owned) says where the weights were bound.
  SimulatedRank(const SimulatedMachine& machine, int node, int workers, const RecordedMemoryBinding* memory);

  std::unique_ptr<ThreadPool> make_pool() { return ThreadPool::simulated(workers_, this); }
  int workers() const { return workers_; }
  int node() const { return node_; }
  // By phase, since the last reset (read between steps), each tile and
  // serial span at the time it took here.
  const PhaseLoads& loads() const { return loads_; }
  void reset();
  // Marks the end of a step (between steps, as reset). Steps after the
  // last reset are kept for clamped_loads.
  void step_ends();
  // The loads since the last reset with each tile's CPU time, and each
  // serial span, clamped to the high end of its times at the same place in
  // every step: the same phase, the same count of jobs (or spans) before it
  // in that phase in the step, and for a tile the same job size and index.
  // Of n times at a place, the n / 8 longest are cut to the next longest
  // (a winsorized mean): a decode step repeats its jobs, and a tile's time
  // here is now and then a multiple of its usual (an interrupt of this VM,
  // about 18 us, lands in a tile of a few microseconds; 1-3 ms preemptions
  // happen), which the big machine's cores would not see, while work that
  // comes every few steps (a compressor's row every 4 tokens) keeps its
  // cost. Places seen in fewer than 8 steps keep their times.
  PhaseLoads clamped_loads() const;

  // One step's jobs and the rank thread's serial spans between them, in the
  // order they ran, at the times they took here (unclamped): where a step's
  // time goes, for `dsv4 bench --simulate --trace-step`.
  struct TraceEntry {
    Phase phase = Phase::kOther;
    int64_t tiles = 0;     // 0: a serial span
    double seconds = 0;    // a job's busiest worker (projected), or the span
    double work = 0;       // a job's tiles, all together (projected)
  };
  // Step `step` (0: the first) since the last reset; empty if not recorded.
  std::vector<TraceEntry> trace_of_step(size_t step) const;

  void read(const void* at, int64_t bytes) override;
  void moved(int64_t local, int64_t peer) override;
  void job_begins(int64_t tiles) override;
  void tile_begins(int64_t index) override;
  void tile_ends(double cpu_seconds) override;
  void job_ends() override;
  void phase_changes(Phase from, Phase to) override;

 private:
  struct Tile {
    double cpu = 0, bytes = 0;
    double link_bytes = 0;  // read from another node (a collective's copies)
  };
  // A job or serial span as recorded, at its place in its step: its phase
  // and the count of jobs (spans) of that phase before it in the step.
  struct JobRecord {
    int phase = 0;
    int64_t ordinal = 0;
    size_t first = 0, count = 0;  // its tiles in tiles_
  };
  struct SpanRecord {
    int phase = 0;
    int64_t ordinal = 0;
    double seconds = 0;
  };
  // jobs_ and spans_ interleaved in the order they ended.
  struct Event {
    bool job = false;
    size_t index = 0;  // into jobs_ or spans_
  };
  // A job's projected work (all tiles, as PhaseLoad::work counts it) and
  // busiest worker, its tiles handed out in order, each to the worker that
  // frees up first.
  struct Schedule {
    double work = 0, busiest = 0;
  };
  Schedule schedule(const Tile* tiles, size_t count) const;
  // Adds the rank thread's CPU time since the last event to the current
  // phase's serial time: the time between a step's jobs, and of the calls
  // the pool ran inline (a step's tail counts toward the next step's head).
  void advance_serial();
  // The rank thread's phase; a tile's, its job's (tiles after a job's
  // first run on a thread of their own, ThreadPool::OtherWorkers).
  PhaseLoad& phase() { return loads_[static_cast<int>(in_tile_ ? job_phase_ : PhaseTimer::current())]; }

  SimulatedMachine machine_;
  int node_, workers_;
  const RecordedMemoryBinding* memory_;
  PhaseLoads loads_{};
  // Every job's tiles (the running job's last) and every span since the
  // last reset, in buffers reserved once: a decode step records about
  // 100 KB, and on the rank thread's heap, growing every step, it pushed
  // the model's per-step buffers onto fresh pages, whose faults were then
  // measured as the rank's serial time (about a tenth of it at 2 x 64).
  std::vector<Tile> tiles_;
  std::vector<JobRecord> jobs_;
  std::vector<SpanRecord> spans_;
  std::vector<Event> events_;
  std::vector<size_t> step_starts_;  // each step's first event (the first step's is 0)
  size_t job_first_ = 0;  // the running job's first tile
  Phase job_phase_ = Phase::kOther;  // and the phase it runs in
  std::array<int64_t, kNumPhases> jobs_in_{}, spans_in_{};  // this step's, by phase, so far
  bool in_tile_ = false;
  double serial_mark_ = -1;  // thread CPU time at the last event
};

}  // namespace dsv4
