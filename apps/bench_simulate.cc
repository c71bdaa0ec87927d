#include "bench_simulate.h"

#include <immintrin.h>

#include <atomic>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>

#include "base/phase_timer.h"
#include "base/thread_pool.h"
#include "bench_throughput.h"
#include "checkpoint/config_json.h"
#include "dist/numa_placement.h"
#include "model_source.h"
#include "runtime/engine.h"
#include "runtime/local_executor.h"

namespace dsv4::app {
namespace {

using Clock = std::chrono::steady_clock;

// What one scenario measured: the tokens every request produced, and each
// rank's loads over the measured steps.
struct Outcome {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<PhaseLoads> loads;  // by rank (simulated runs): each place's rare long times clamped (clamped_loads)
  std::vector<PhaseLoads> raw;    // by rank: every tile and span at the time it took here
  std::vector<CollectiveLoad> comm;  // by rank, over the measured steps
  int64_t tokens_measured = 0;    // tokens the measured steps produced (prefill: the chunk's prompt tokens)
  std::vector<SimulatedRank::TraceEntry> trace;  // rank 0's traced step (--trace-step)
};

struct Scenario {
  std::string name;
  int64_t batch = 1, prompt = 0, gen = 0;  // gen 0: measure the prefill step
  int64_t trace_step = 0;  // a measured decode step (1: the first) whose jobs and spans to list; 0: none
};

// One engine over the checkpoint: on the placement's simulated pools, its
// memory recorded in `memory`, when `sims` is given; else unplaced.
StatusOr<std::unique_ptr<Engine>> make_engine(const SimulateOptions& o, const std::string& dir,
                                              const NumaPlacement& placement, RecordedMemoryBinding* memory,
                                              std::vector<std::unique_ptr<SimulatedRank>>* sims) {
  DSV4_ASSIGN_OR_RETURN(ModelConfig config, load_any_model_config(dir + "/config.json"));
  ParallelOptions p;
  p.topology = placement.layout;
  if (sims) {
    p.placement = placement.ranks;
    p.memory = memory;
    for (size_t r = 0; r < p.placement.size(); ++r) {
      sims->push_back(std::make_unique<SimulatedRank>(o.machine, p.placement[r].node,
                                                      static_cast<int>(p.placement[r].cpus.size()), memory));
    }
    p.rank_pools = [sims](int r) { return (*sims)[r]->make_pool(); };
  }
  EngineOptions eo;
  eo.scheduler.max_num_seqs = 16;
  eo.scheduler.max_num_batched_tokens = std::max<int64_t>(o.chunk, 4096);  // long contexts fill in chunks
  eo.cache.memory_bytes = (int64_t{512} << 20) * p.topology.tp * p.topology.dp;
  eo.cache.max_num_seqs = 16;
  DSV4_ASSIGN_OR_RETURN(KvCacheOptions cache, Engine::cache_options(config, eo));
  ModelOptions mo;
  mo.numerics = o.numerics;
  DSV4_ASSIGN_OR_RETURN(auto exec, LocalExecutor::create(dir, mo, p, cache));
  return Engine::create(std::move(exec), eo.scheduler);
}

Status run(Engine& engine, const Scenario& s, std::vector<std::unique_ptr<SimulatedRank>>* sims, Outcome* out) {
  const ModelConfig& c = engine.config();
  std::mt19937 rng(11);
  SamplingParams greedy;
  greedy.temperature = 0;
  greedy.max_tokens = std::max<int64_t>(1, s.gen + 1);
  greedy.ignore_eos = true;
  auto random_prompt = [&] {
    std::vector<int32_t> prompt(s.prompt);
    for (auto& t : prompt) t = static_cast<int32_t>(2 + rng() % (c.vocab_size - 2));
    return prompt;
  };
  if (s.gen == 0) {
    // A chunk of another prompt first, unmeasured (one token: greedy's
    // max_tokens here), as a serving engine has run one before: the first
    // chunk's activations land on fresh pages, and each page's first write
    // (a fault) fell on whichever tile wrote it, a few in a job taking
    // milliseconds more than the rest.
    DSV4_RETURN_IF_ERROR(engine.add_request(random_prompt(), greedy).status());
    while (engine.has_unfinished())
      for (const RequestOutput& r : engine.step())
        if (!r.error.empty()) return internal_error(r.error);
  }
  std::map<int64_t, size_t> index;  // request id -> its tokens
  for (int64_t b = 0; b < s.batch; ++b) {
    DSV4_ASSIGN_OR_RETURN(int64_t id, engine.add_request(random_prompt(), greedy));
    index[id] = static_cast<size_t>(b);
  }
  out->tokens.assign(index.size(), {});
  auto step = [&] {
    int64_t made = 0;
    for (const RequestOutput& r : engine.step()) {
      if (!r.error.empty()) return StatusOr<int64_t>(internal_error(r.error));
      std::vector<int32_t>& mine = out->tokens[index.at(r.id)];
      mine.insert(mine.end(), r.new_tokens.begin(), r.new_tokens.end());
      made += static_cast<int64_t>(r.new_tokens.size());
    }
    return StatusOr<int64_t>(made);
  };
  auto* ranks = dynamic_cast<LocalExecutor*>(&engine.executor());
  std::vector<Communicator::Traffic> before;
  auto reset = [&] {
    if (sims)
      for (auto& sim : *sims) sim->reset();
    if (ranks) before = ranks->traffic();
  };
  if (s.gen == 0) {  // the prefill step alone
    reset();
    DSV4_RETURN_IF_ERROR(step().status());
    out->tokens_measured = s.prompt * s.batch;
  } else {
    while (true) {  // every prompt prefilled
      DSV4_RETURN_IF_ERROR(step().status());
      bool all = true;
      for (const auto& t : out->tokens) all &= !t.empty();
      if (all) break;
    }
    reset();
    for (int64_t g = 0; g < s.gen; ++g) {
      DSV4_ASSIGN_OR_RETURN(int64_t made, step());
      out->tokens_measured += made;
      if (sims)
        for (auto& sim : *sims) sim->step_ends();
    }
  }
  if (sims && s.trace_step > 0) out->trace = sims->front()->trace_of_step(static_cast<size_t>(s.trace_step - 1));
  if (sims)
    for (auto& sim : *sims) {
      out->loads.push_back(sim->clamped_loads());
      out->raw.push_back(sim->loads());
    }
  if (ranks) {
    const auto after = ranks->traffic();
    for (size_t r = 0; r < after.size(); ++r)
      out->comm.push_back({after[r].collectives - before[r].collectives,
                           static_cast<double>(after[r].bytes - before[r].bytes)});
  }
  while (engine.has_unfinished()) engine.step();
  return Status::Ok();
}

// Seconds of one pool job (a wake-up and a join) on this machine's pool: a
// job of two tiles that wait for each other, so that a second thread must
// wake and take one (alone, the caller would run both before it woke).
double measure_job_seconds() {
  ThreadPool& pool = ThreadPool::global();
  if (pool.num_threads() < 2) return 0;
  std::atomic<int> arrived{0};
  auto body = [&](int64_t, int64_t) {
    arrived.fetch_add(1);
    for (int spins = 0; arrived.load() % 2 && spins < 1 << 22; ++spins) _mm_pause();
  };
  auto run = [&](int jobs) {
    const auto t0 = Clock::now();
    for (int i = 0; i < jobs; ++i) pool.parallel_for(2, 1, body);
    return std::chrono::duration<double>(Clock::now() - t0).count() / jobs;
  };
  run(200);
  return run(5000);
}

// Seconds one read of the thread CPU clock takes here (a system call under
// some hypervisors).
double measure_clock_seconds() {
  constexpr int kReads = 100000;
  double last = thread_cpu_seconds();
  const double first = last;
  for (int i = 0; i < kReads; ++i) last = thread_cpu_seconds();
  return (last - first) / kReads;
}

double mib(double bytes) { return bytes / 1048576.0; }

// A step's jobs and serial spans in order, each on a line, with the time of
// the whole step's spans and jobs by phase after them.
void print_trace(const Scenario& s, const std::vector<SimulatedRank::TraceEntry>& trace, int workers) {
  std::printf("  step %lld, rank 0, in order (job: its tiles, its busiest worker's projected time and its balance; "
              "serial: the rank thread's time outside jobs, measured here):\n",
              static_cast<long long>(s.trace_step));
  std::array<double, kNumPhases> serial{}, busiest{};
  for (const SimulatedRank::TraceEntry& e : trace) {
    const int p = static_cast<int>(e.phase);
    if (e.tiles > 0) {
      busiest[p] += e.seconds;
      std::printf("    %-18s job %5lld tiles %9.2f us, balance %5.1f%%\n", phase_name(e.phase),
                  static_cast<long long>(e.tiles), 1e6 * e.seconds,
                  e.seconds > 0 ? 100 * e.work / workers / e.seconds : 100.0);
    } else {
      serial[p] += e.seconds;
      std::printf("    %-18s serial          %9.2f us\n", phase_name(e.phase), 1e6 * e.seconds);
    }
  }
  std::printf("  step %lld by phase: serial us / jobs' busiest us:", static_cast<long long>(s.trace_step));
  for (int p = 0; p < kNumPhases; ++p)
    if (serial[p] > 0 || busiest[p] > 0)
      std::printf(" %s %.1f / %.1f;", phase_name(static_cast<Phase>(p)), 1e6 * serial[p], 1e6 * busiest[p]);
  std::printf("\n");
}

void print_scenario(const SimulateOptions& o, const Scenario& s, const Outcome& out, int layers) {
  const SimulatedMachine& m = o.machine;
  const double per = 1.0 / static_cast<double>(std::max<int64_t>(1, out.tokens_measured));
  const int ranks = static_cast<int>(out.loads.size());
  const int workers = m.cores_per_node() * m.nodes / ranks;
  std::printf("\n%s: %lld tokens measured; rank 0 of %d (%d logical workers), per token\n", s.name.c_str(),
              static_cast<long long>(out.tokens_measured), ranks, workers);
  std::printf("  %-18s %9s %9s %8s %11s %10s %12s %11s %13s %13s\n", "phase", "jobs", "tiles", "balance",
              "busiest ms", "serial ms", "weights MiB", "remote MiB", "unplaced MiB", "projected ms");
  const PhaseLoads& l0 = out.loads.front();
  const CollectiveLoad comm0 = out.comm.empty() ? CollectiveLoad{} : out.comm.front();
  for (int p = 0; p < kNumPhases; ++p) {
    const PhaseLoad& l = l0[p];
    if (l.jobs == 0 && l.serial == 0 && l.bytes() == 0) continue;
    std::printf("  %-18s %9.1f %9.0f %7.1f%% %11.3f %10.3f %12.2f %11.2f %13.2f %13.3f\n",
                phase_name(static_cast<Phase>(p)), l.jobs * per, l.tiles * per, 100 * l.balance(workers),
                1e3 * l.busiest * per, 1e3 * l.serial * per, mib(l.bytes() * per), mib(l.remote * per),
                mib(l.unplaced * per), 1e3 * projected_seconds(l0, static_cast<Phase>(p), m, comm0) * per);
  }
  // The busiest rank's projected step, and the worst rank's balance.
  auto step_of = [&](const std::vector<PhaseLoads>& loads, double* balance) {
    double seconds = 0;
    *balance = 1;
    for (int r = 0; r < ranks; ++r) {
      const CollectiveLoad comm = r < static_cast<int>(out.comm.size()) ? out.comm[r] : CollectiveLoad{};
      seconds = std::max(seconds, projected_step_seconds(loads[r], m, comm));
      *balance = std::min(*balance, total_of(loads[r]).balance(workers));
    }
    return seconds;
  };
  double bytes = 0, remote = 0, worst_balance = 1, raw_balance = 1;
  const double step_s = step_of(out.loads, &worst_balance), raw_step_s = step_of(out.raw, &raw_balance);
  for (int r = 0; r < ranks; ++r) {
    const PhaseLoad t = total_of(out.loads[r]);
    bytes = std::max(bytes, t.bytes());
    remote += t.remote + t.unplaced;
  }
  const PhaseLoad t0 = total_of(l0);
  std::printf("  %-18s %9.1f %9.0f %7.1f%% %11.3f %10.3f %12.2f %11.2f %13.2f %13.3f\n", "whole step", t0.jobs * per,
              t0.tiles * per, 100 * t0.balance(workers), 1e3 * t0.busiest * per, 1e3 * t0.serial * per,
              mib(t0.bytes() * per), mib(t0.remote * per), mib(t0.unplaced * per),
              1e3 * projected_step_seconds(l0, m, comm0) * per);
  if (comm0.collectives)
    std::printf("  communication: %.1f collectives and %.3f MiB a token sent (rank 0), projected as 2 barriers each at "
                "the job cost, the jobs of their copies, and the bytes copied on the rank's thread at one core's "
                "bandwidth (%.3f MiB a token, %.3f of them from other ranks); its serial time above is measured here, "
                "waits included\n",
                comm0.collectives * per, mib(comm0.bytes * per),
                mib((l0[static_cast<int>(Phase::kCommunication)].inline_local +
                     l0[static_cast<int>(Phase::kCommunication)].inline_peer) * per),
                mib(l0[static_cast<int>(Phase::kCommunication)].inline_peer * per));
  const double projected = static_cast<double>(out.tokens_measured) / step_s;
  const double roofline = static_cast<double>(out.tokens_measured) / (bytes / m.node_bandwidth);
  std::printf("  pool jobs a layer: %.1f; balance of the whole step, worst rank: %.1f%%; weight bytes read off the "
              "reading rank's node, all ranks: %.0f\n",
              t0.jobs * per * (s.gen ? 1.0 : static_cast<double>(out.tokens_measured)) / layers, 100 * worst_balance,
              remote * per);
  if (s.gen == 0) {  // a prefill chunk reads each weight once for thousands of tokens: no memory roofline
    std::printf("  projected %.2f tok/s\n", projected);
    return;
  }
  std::printf("  projected %.2f tok/s; roofline %.2f tok/s (the busiest rank's weight bytes a step over its node's "
              "%.0f GB/s): %.1f%% of roofline\n",
              projected, roofline, m.node_bandwidth / 1e9, 100 * projected / roofline);
  // The layers alone: a checkpoint shrunk in layers keeps the vocabulary's
  // head whole, which streams near the roofline and would flatter the
  // step; the layers' share is what a released model's 43 or 61 repeat.
  std::vector<PhaseLoads> layers_only = out.loads;
  double layer_bytes = 0, layer_balance = 1;
  for (PhaseLoads& l : layers_only) {
    l[static_cast<int>(Phase::kHead)] = {};
    layer_bytes = std::max(layer_bytes, total_of(l).bytes());
  }
  const double steps = static_cast<double>(s.gen);  // the loads are the measured steps'
  const double layer_s = step_of(layers_only, &layer_balance) / steps;
  const double layer_roofline_s = layer_bytes / steps / m.node_bandwidth;
  std::printf("  the %d layers alone (every phase but embedding + head): projected %.3f ms a step against %.3f ms at "
              "the roofline: %.1f%% of roofline, %.3f ms a layer\n",
              layers, 1e3 * layer_s, 1e3 * layer_roofline_s, 100 * layer_roofline_s / layer_s, 1e3 * layer_s / layers);
  const double raw = static_cast<double>(out.tokens_measured) / raw_step_s;
  std::printf("  above, each tile's and serial span's time at most the next longest after the longest eighth of its "
              "times at its place in the %lld steps; at the times they took: projected %.2f tok/s, %.1f%% of "
              "roofline, balance of the whole step %.1f%% (worst rank)\n",
              static_cast<long long>(s.gen), raw, 100 * raw / roofline, 100 * raw_balance);
  if (!out.trace.empty()) print_trace(s, out.trace, workers);
}

}  // namespace

Status parse_simulated_machine(const std::string& spec, SimulateOptions* out) {
  size_t at = 0;
  bool cores = false;
  while (at < spec.size()) {
    const size_t comma = spec.find(',', at);
    const std::string item = spec.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    at = comma == std::string::npos ? spec.size() : comma + 1;
    const size_t eq = item.find('=');
    char* end = nullptr;
    const double v = eq == std::string::npos ? 0 : std::strtod(item.c_str() + eq + 1, &end);
    if (eq == std::string::npos || eq + 1 == item.size() || *end || !(v > 0))
      return invalid_argument("--simulate takes key=value items such as cores=128,nodes=2,bandwidth=400; '" + item +
                              "' is not one");
    const std::string key = item.substr(0, eq);
    if (key == "cores") out->machine.cores = static_cast<int>(v), cores = true;
    else if (key == "nodes") out->machine.nodes = static_cast<int>(v);
    else if (key == "bandwidth") out->machine.node_bandwidth = v * 1e9;
    else if (key == "job-us") out->job_seconds = v * 1e-6;
    else if (key == "core-bandwidth") out->machine.core_peak_bandwidth = v * 1e9;
    else if (key == "link") out->machine.link_bandwidth = v * 1e9;
    else return invalid_argument("--simulate knows cores, nodes, bandwidth (GB/s a node), core-bandwidth (GB/s one "
                                 "core alone), link (GB/s a node reads from another) and job-us, not '" + key + "'");
  }
  if (!cores) return invalid_argument("--simulate needs cores=N (in all, e.g. cores=128,nodes=2)");
  if (out->machine.nodes < 1 || out->machine.cores % out->machine.nodes)
    return invalid_argument("--simulate: cores=" + std::to_string(out->machine.cores) + " do not split evenly over nodes=" +
                            std::to_string(out->machine.nodes));
  return Status::Ok();
}

int bench_simulate(const SimulateOptions& o_in) {
  SimulateOptions o = o_in;
  auto fail = [](const Status& s) {
    std::fprintf(stderr, "dsv4 bench --simulate: %s\n", s.message().c_str());
    return 2;
  };
  auto dir = ModelDir::open(o.model);
  if (!dir.ok()) return fail(dir.status());
  auto config = load_any_model_config(dir->path() + "/config.json");
  if (!config.ok()) return fail(config.status());
  if (o.ctx + o.gen + 2 > config->max_position_embeddings || o.chunk + 2 > config->max_position_embeddings)
    return fail(invalid_argument(model_name(o.model) + " has " + std::to_string(config->max_position_embeddings) +
                                 " positions, fewer than --ctx + --gen or the prefill chunk"));
  o.machine.job_seconds = o.job_seconds >= 0 ? o.job_seconds : measure_job_seconds();
  o.machine.clock_seconds = measure_clock_seconds();
  if (o.machine.core_peak_bandwidth == 0) {  // one core of this machine, alone
    ThreadPool one(1);
    ThreadPool::Scope scope(&one);
    o.machine.core_peak_bandwidth = read_bandwidth();
  }
  auto description = MachineTopology::description_of(o.machine.nodes, o.machine.nodes, o.machine.cores);
  if (!description.ok()) return fail(description.status());
  auto machine = MachineTopology::synthetic(*description);
  if (!machine.ok()) return fail(machine.status());
  auto placement = place_ranks(*machine, NumaMode::kAuto, o.asked);
  if (!placement.ok()) return fail(placement.status());
  // One node: the ranks share it (unpinned as serve runs them); simulated
  // on it all the same.
  for (RankPlacement& r : placement->ranks)
    if (r.node < 0) r.node = machine->nodes.front().os_index;
  std::printf("dsv4 bench --simulate: %s on %s (hwloc synthetic '%s'), %.0f GB/s a node, %.0f GB/s from another "
              "node, %s numerics\n%s\n",
              model_name(o.model).c_str(), machine->describe().c_str(), description->c_str(),
              o.machine.node_bandwidth / 1e9, o.machine.link_bandwidth / 1e9, kernels::numerics_name(o.numerics),
              placement->describe().c_str());
  std::printf("a pool job (wake-up and join) costs %.2f us here (%s, %d threads); the projection charges that to "
              "every job\nreading a thread's CPU clock costs %.2f us here (measured), taken off each tile's measured "
              "time\none core streams %.2f GB/s alone (%s); a tile's bandwidth is its node's split among the job's busy "
              "workers, at most that\n",
              1e6 * o.machine.job_seconds, o.job_seconds >= 0 ? "given" : "measured", ThreadPool::global().num_threads(),
              1e6 * o.machine.clock_seconds, o.machine.core_peak_bandwidth / 1e9,
              o_in.machine.core_peak_bandwidth > 0 ? "given" : "measured here");

  std::vector<Scenario> scenarios;
  for (int64_t b : o.batches)
    scenarios.push_back({"decode batch " + std::to_string(b) + " after " + std::to_string(o.ctx) + " prompt tokens", b,
                         o.ctx, o.gen, std::min(o.trace_step, o.gen)});
  if (o.chunk > 0) scenarios.push_back({"prefill of a " + std::to_string(o.chunk) + "-token chunk", 1, o.chunk, 0});

  std::vector<Outcome> plain(scenarios.size());
  if (o.compare) {
    auto engine = make_engine(o, dir->path(), *placement, nullptr, nullptr);
    if (!engine.ok()) return fail(engine.status());
    for (size_t i = 0; i < scenarios.size(); ++i)
      if (Status s = run(**engine, scenarios[i], nullptr, &plain[i]); !s.ok()) return fail(s);
  }
  RecordedMemoryBinding memory;
  std::vector<std::unique_ptr<SimulatedRank>> sims;
  auto engine = make_engine(o, dir->path(), *placement, &memory, &sims);
  if (!engine.ok()) return fail(engine.status());
  keep_step_memory();  // as serving does: a step's buffers reuse the last one's pages
  std::printf("memory bound to each node:");
  for (const NumaNode& n : machine->nodes) std::printf(" node %d %.1f MiB", n.os_index, mib(memory.bytes_on(n.os_index)));
  std::printf("\n");
  int bad = 0;
  for (size_t i = 0; i < scenarios.size(); ++i) {
    Outcome out;
    if (Status s = run(**engine, scenarios[i], &sims, &out); !s.ok()) return fail(s);
    print_scenario(o, scenarios[i], out, config->n_layers);
    if (o.compare) {
      const bool same = out.tokens == plain[i].tokens;
      bad += !same;
      std::printf("  tokens %s an unsimulated run of the same layout\n", same ? "identical to" : "DIFFER FROM");
    }
  }
  std::printf("\nprojection: a tile takes max(its CPU time here, its bytes (weights, or a collective's copies) / its "
              "share of the node's bandwidth, plus the bytes it read from another node / its share of the link); a job "
              "its busiest worker's tiles plus the job cost; a step its jobs plus the rank thread's time outside them, "
              "collectives priced (docs/simulation.md)\n");
  return bad ? 1 : 0;
}

}  // namespace dsv4::app
