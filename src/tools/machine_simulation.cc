#include "tools/machine_simulation.h"

#include <algorithm>
#include <functional>
#include <map>
#include <queue>
#include <span>
#include <tuple>

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
  inline_local += o.inline_local;
  inline_peer += o.inline_peer;
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
         l.inline_local / m.share_of(1) + l.inline_peer / m.link_share_of(1);
}

double projected_step_seconds(const PhaseLoads& loads, const SimulatedMachine& m, const CollectiveLoad& comm) {
  double s = 0;
  for (int p = 0; p < kNumPhases; ++p) s += projected_seconds(loads, static_cast<Phase>(p), m, comm);
  return s;
}

SimulatedRank::SimulatedRank(const SimulatedMachine& machine, int node, int workers,
                             const RecordedMemoryBinding* memory)
    : machine_(machine), node_(node), workers_(std::max(1, workers)), memory_(memory) {
  // Virtual until written: a simulated decode step holds a few thousand
  // tiles and a few hundred spans.
  tiles_.reserve(size_t{1} << 22);
  jobs_.reserve(size_t{1} << 18);
  spans_.reserve(size_t{1} << 20);
  events_.reserve(size_t{1} << 21);
  reset();
}

void SimulatedRank::reset() {
  loads_ = {};
  tiles_.clear();
  jobs_.clear();
  spans_.clear();
  events_.clear();
  step_starts_.clear();
  step_ends();
}

void SimulatedRank::step_ends() {
  step_starts_.push_back(events_.size());
  jobs_in_ = {};
  spans_in_ = {};
}

void SimulatedRank::advance_serial() {
  const double now = thread_cpu_seconds();
  if (serial_mark_ >= 0) {
    // The span holds about one clock read, as a tile does.
    const double span = std::max(0.0, now - serial_mark_ - machine_.clock_seconds);
    const int p = static_cast<int>(PhaseTimer::current());
    loads_[p].serial += span;
    events_.push_back({false, spans_.size()});
    spans_.push_back({p, spans_in_[p]++, span});
  }
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
  if (in_tile_) tiles_.back().bytes += b;
}

void SimulatedRank::moved(int64_t local, int64_t peer) {
  if (!in_tile_) {
    advance_serial();
    phase().inline_local += static_cast<double>(local);
    phase().inline_peer += static_cast<double>(peer);
    return;
  }
  tiles_.back().bytes += static_cast<double>(local);
  tiles_.back().link_bytes += static_cast<double>(peer);
}

void SimulatedRank::job_begins(int64_t) {
  advance_serial();
  job_first_ = tiles_.size();
  job_phase_ = PhaseTimer::current();
}

void SimulatedRank::tile_begins(int64_t) {
  tiles_.push_back({});
  in_tile_ = true;
}

void SimulatedRank::tile_ends(double cpu_seconds) {
  tiles_.back().cpu = std::max(0.0, cpu_seconds - machine_.clock_seconds);
  in_tile_ = false;
}

SimulatedRank::Schedule SimulatedRank::schedule(const Tile* tiles, size_t count) const {
  // Each tile, in order, to the worker that is free first.
  std::priority_queue<double, std::vector<double>, std::greater<double>> free_at;
  for (int w = 0; w < workers_; ++w) free_at.push(0.0);
  Schedule s;
  // A job of fewer tiles than workers streams each at a larger share of
  // the node; spread over every worker, each would get the share of all.
  const int streaming = static_cast<int>(std::min<size_t>(workers_, count));
  const double share = machine_.share_of(streaming), link_share = machine_.link_share_of(streaming);
  const double share_of_all = machine_.share_of(workers_), link_share_of_all = machine_.link_share_of(workers_);
  for (const Tile& t : std::span(tiles, count)) {
    const double done = free_at.top() + std::max(t.cpu, t.bytes / share + t.link_bytes / link_share);
    free_at.pop();
    free_at.push(done);
    s.work += std::max(t.cpu, t.bytes / share_of_all + t.link_bytes / link_share_of_all);
    s.busiest = std::max(s.busiest, done);
  }
  return s;
}

void SimulatedRank::job_ends() {
  const size_t count = tiles_.size() - job_first_;
  const Schedule s = schedule(tiles_.data() + job_first_, count);
  PhaseLoad& p = phase();
  ++p.jobs;
  p.tiles += static_cast<int64_t>(count);
  p.work += s.work;
  p.busiest += s.busiest;
  const int phase = static_cast<int>(PhaseTimer::current());
  events_.push_back({true, jobs_.size()});
  jobs_.push_back({phase, jobs_in_[phase]++, job_first_, count});
  serial_mark_ = thread_cpu_seconds();
}

std::vector<SimulatedRank::TraceEntry> SimulatedRank::trace_of_step(size_t step) const {
  // step_starts_[0] is reset's mark; step k runs from mark k to mark k + 1.
  if (step + 1 >= step_starts_.size()) return {};
  std::vector<TraceEntry> out;
  for (size_t e = step_starts_[step]; e < step_starts_[step + 1]; ++e) {
    const Event& ev = events_[e];
    if (ev.job) {
      const JobRecord& j = jobs_[ev.index];
      const Schedule sc = schedule(tiles_.data() + j.first, j.count);
      out.push_back({static_cast<Phase>(j.phase), static_cast<int64_t>(j.count), sc.busiest, sc.work});
    } else {
      const SpanRecord& s = spans_[ev.index];
      out.push_back({static_cast<Phase>(s.phase), 0, s.seconds});
    }
  }
  return out;
}

namespace {

// The cap of a place's times: the (n - n / 8)-th shortest of its n times.
double cap_of(std::vector<double> v) {
  const size_t keep = v.size() - v.size() / 8;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(keep - 1), v.end());
  return v[keep - 1];
}

}  // namespace

PhaseLoads SimulatedRank::clamped_loads() const {
  // Each place's times over the steps: jobs by (phase, ordinal, tiles),
  // a vector of times a tile; spans by (phase, ordinal).
  using JobPlace = std::tuple<int, int64_t, size_t>;
  using SpanPlace = std::pair<int, int64_t>;
  std::map<JobPlace, std::vector<std::vector<double>>> job_times;
  std::map<SpanPlace, std::vector<double>> span_times;
  for (const JobRecord& j : jobs_) {
    auto& times = job_times[{j.phase, j.ordinal, j.count}];
    times.resize(j.count);
    for (size_t t = 0; t < j.count; ++t) times[t].push_back(tiles_[j.first + t].cpu);
  }
  for (const SpanRecord& s : spans_) span_times[{s.phase, s.ordinal}].push_back(s.seconds);
  std::map<JobPlace, std::vector<double>> job_caps;
  for (const auto& [place, times] : job_times)
    for (const std::vector<double>& t : times) job_caps[place].push_back(cap_of(t));
  std::map<SpanPlace, double> span_caps;
  for (const auto& [place, times] : span_times) span_caps[place] = cap_of(times);

  PhaseLoads out = loads_;  // jobs, tiles and bytes as they were
  for (PhaseLoad& l : out) l.work = l.busiest = l.serial = 0;
  for (const JobRecord& j : jobs_) {
    std::vector<Tile> tiles(tiles_.begin() + j.first, tiles_.begin() + j.first + j.count);
    const std::vector<double>& caps = job_caps.at({j.phase, j.ordinal, j.count});
    for (size_t t = 0; t < tiles.size(); ++t) tiles[t].cpu = std::min(tiles[t].cpu, caps[t]);
    const Schedule s = schedule(tiles.data(), tiles.size());
    out[j.phase].work += s.work;
    out[j.phase].busiest += s.busiest;
  }
  for (const SpanRecord& s : spans_) out[s.phase].serial += std::min(s.seconds, span_caps.at({s.phase, s.ordinal}));
  return out;
}

}  // namespace dsv4
