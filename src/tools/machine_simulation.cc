#include "tools/machine_simulation.h"

#include <algorithm>
#include <functional>
#include <queue>

namespace dsv4 {

PhaseLoad& PhaseLoad::operator+=(const PhaseLoad& o) {
  jobs += o.jobs;
  tiles += o.tiles;
  work += o.work;
  busiest += o.busiest;
  serial += o.serial;
  local += o.local;
  remote += o.remote;
  unplaced += o.unplaced;
  return *this;
}

PhaseLoad total_of(const PhaseLoads& loads) {
  PhaseLoad t;
  for (const PhaseLoad& l : loads) t += l;
  return t;
}

double projected_seconds(const PhaseLoads& loads, Phase p, const SimulatedMachine& m, const CollectiveLoad& comm) {
  const PhaseLoad& l = loads[static_cast<int>(p)];
  if (p != Phase::kCommunication) return l.seconds(m.job_seconds);
  return l.busiest + static_cast<double>(l.jobs + 2 * comm.collectives) * m.job_seconds +
         comm.bytes / m.core_bandwidth();
}

double projected_step_seconds(const PhaseLoads& loads, const SimulatedMachine& m, const CollectiveLoad& comm) {
  double s = 0;
  for (int p = 0; p < kNumPhases; ++p) s += projected_seconds(loads, static_cast<Phase>(p), m, comm);
  return s;
}

SimulatedRank::SimulatedRank(const SimulatedMachine& machine, int node, int workers,
                             const RecordedMemoryBinding* memory)
    : machine_(machine), node_(node), workers_(std::max(1, workers)), memory_(memory) {}

void SimulatedRank::advance_serial() {
  const double now = thread_cpu_seconds();
  // The span holds about one clock read, as a tile does.
  if (serial_mark_ >= 0) phase().serial += std::max(0.0, now - serial_mark_ - machine_.clock_seconds);
  serial_mark_ = now;
}

void SimulatedRank::phase_changes(Phase, Phase) {
  if (!in_tile_) advance_serial();  // still the phase it was spent in
}

void SimulatedRank::read(const void* at, int64_t bytes) {
  if (!in_tile_) advance_serial();  // a call the pool ran inline
  const int where = memory_ ? memory_->node_of(at) : -1;
  PhaseLoad& p = phase();
  const double b = static_cast<double>(bytes);
  if (where < 0) p.unplaced += b;
  else if (where == node_) p.local += b;
  else p.remote += b;
  if (in_tile_) job_.back().bytes += b;
}

void SimulatedRank::job_begins(int64_t tiles) {
  advance_serial();
  job_.clear();
  job_.reserve(static_cast<size_t>(tiles));
}

void SimulatedRank::tile_begins(int64_t) {
  job_.push_back({});
  in_tile_ = true;
}

void SimulatedRank::tile_ends(double cpu_seconds) {
  job_.back().cpu = std::max(0.0, cpu_seconds - machine_.clock_seconds);
  in_tile_ = false;
}

void SimulatedRank::job_ends() {
  // Each tile, in order, to the worker that is free first.
  std::priority_queue<double, std::vector<double>, std::greater<double>> free_at;
  for (int w = 0; w < workers_; ++w) free_at.push(0.0);
  double work = 0, busiest = 0;
  const double share = machine_.share_of(std::min<int>(workers_, static_cast<int>(job_.size())));
  for (const Tile& t : job_) {
    const double seconds = std::max(t.cpu, t.bytes / share);
    const double done = free_at.top() + seconds;
    free_at.pop();
    free_at.push(done);
    work += seconds;
    busiest = std::max(busiest, done);
  }
  PhaseLoad& p = phase();
  ++p.jobs;
  p.tiles += static_cast<int64_t>(job_.size());
  p.work += work;
  p.busiest += busiest;
  serial_mark_ = thread_cpu_seconds();
}

}  // namespace dsv4
