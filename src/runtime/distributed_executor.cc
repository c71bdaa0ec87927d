#include "runtime/distributed_executor.h"
#include "runtime/rank_model.h"

#include <unistd.h>

#include <chrono>

#include "base/logging.h"
#include "checkpoint/config_json.h"

namespace dsv4 {
namespace {

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// True on every rank when `ok` is true on every rank.
bool all_ok(Communicator& world, bool ok) {
  int mine = ok;
  std::vector<int> all(world.size());
  world.all_gather(&mine, sizeof mine, all.data());
  for (int a : all) ok = ok && a;
  return ok;
}

// Rank 0's plan to every rank.
StepPlan receive_plan(Communicator& world, const StepPlan* plan) {
  std::vector<char> bytes;
  if (plan) bytes = serialize(*plan);
  uint64_t n = bytes.size();
  world.broadcast(&n, sizeof n, 0);
  bytes.resize(n);
  world.broadcast(bytes.data(), n, 0);
  if (plan) return *plan;
  StatusOr<StepPlan> got = deserialize_plan(bytes);
  if (!got.ok()) {
    log_error(got.status().message());
    world.abort(1);
  }
  return std::move(*got);
}

// Each group's first rank sends its result to rank 0; rank 0 gets them all
// (by rank).
std::vector<std::vector<char>> send_results(Communicator& world, const std::vector<char>& mine) {
  const int ranks = world.size();
  std::vector<uint64_t> sizes(ranks);
  const uint64_t n = mine.size();
  world.all_gather(&n, sizeof n, sizes.data());
  std::vector<size_t> send(ranks, 0), recv(ranks, 0);
  send[0] = mine.size();
  size_t total = 0;
  if (world.rank() == 0)
    for (int r = 0; r < ranks; ++r) total += recv[r] = sizes[r];
  std::vector<char> got(total);
  world.all_to_all_v(mine.data(), send, got.data(), recv);
  std::vector<std::vector<char>> out(ranks);
  size_t at = 0;
  for (int r = 0; r < ranks; ++r) {
    out[r].assign(got.begin() + at, got.begin() + at + recv[r]);
    at += recv[r];
  }
  return out;
}

// One step on this rank: its group's chunks (none for a heartbeat).
std::vector<char> execute(RankSetup& s, Communicator& world, const StepPlan& plan) {
  if (plan.chunks.empty()) return {};
  StatusOr<GroupResult> result = s.worker->execute(plan);
  if (!result.ok()) {  // the ranks cannot continue out of step
    log_error("rank " + std::to_string(world.rank()) + ": " + result.status().message());
    world.abort(1);
  }
  return s.worker->leader() ? serialize(*result) : std::vector<char>();
}

}  // namespace

StatusOr<RankSetup> RankSetup::create(Communicator& world, const DistributedOptions& o) {
  RankSetup s;
  const int rank = world.rank();
  StatusOr<ModelConfig> config = load_any_model_config(o.model_dir + "/config.json");
  StatusOr<Topology> topo = config.ok() ? Topology::make(o.parallel.topology, *config, world.size()) : config.status();
  if (!all_ok(world, topo.ok()))
    return topo.ok() ? internal_error("another rank rejected the topology") : topo.status();
  s.topology = *topo;
  s.groups = RankGroups::split(world, s.topology);

  // Rank 0's budget for every rank, so every group has the same page ids.
  KvCacheOptions cache = o.cache;
  StatusOr<int64_t> budget = KvCacheManager::budget_of(cache);
  int64_t bytes = budget.ok() ? *budget : 0;
  world.broadcast(&bytes, sizeof bytes, 0);
  cache.memory_bytes = bytes;
  StatusOr<std::unique_ptr<KvCacheManager>> kv =
      bytes > 0 ? KvCacheManager::create(CacheGeometry::of(*config, cache.max_draft_tokens), cache) : StatusOr<std::unique_ptr<KvCacheManager>>(
                                                                                 invalid_argument("no KV cache budget"));
  if (!all_ok(world, kv.ok())) return kv.ok() ? internal_error("another rank could not allocate its KV cache") : kv.status();
  const int64_t mine = (*kv)->bytes();
  std::vector<int64_t> all(world.size());
  world.all_gather(&mine, sizeof mine, all.data());
  for (int r = 0; r < world.size(); ++r)
    if (all[r] != all[0])
      return resource_exhausted("rank " + std::to_string(r) + " could only allocate a smaller KV cache; give a " +
                                "--kv-cache-memory every machine has");
  s.cache = std::move(*kv);
  s.cache_budget = bytes;

  ModelOptions mo = o.model;
  if (rank) mo.on_progress = nullptr;
  StatusOr<RankModel> share = load_rank_model(o.model_dir, *config, mo, o.parallel.flashcomm, s.topology, rank, s.groups);
  if (!all_ok(world, share.ok()))
    return share.ok() ? internal_error("another rank could not load its share of the model") : share.status();
  s.model = std::move(share->model);
  s.worker = std::make_unique<RankWorker>(s.model.get(), &s.cache->store(), s.topology.tp > 1 ? s.groups.tp.get() : nullptr,
                                          s.topology.dp_rank(rank));
  return s;
}

StatusOr<std::unique_ptr<DistributedExecutor>> DistributedExecutor::create(Communicator* world,
                                                                            const DistributedOptions& o) {
  DSV4_ASSIGN_OR_RETURN(RankSetup setup, RankSetup::create(*world, o));
  std::unique_ptr<DistributedExecutor> e(new DistributedExecutor(world, std::move(setup), o.step_timeout_ms));
  KvCacheOptions cache = o.cache;
  cache.memory_bytes = e->setup_.cache_budget;
  for (int g = 1; g < e->setup_.topology.dp; ++g) {  // page ids only: the pages live in group g's processes
    DSV4_ASSIGN_OR_RETURN(auto kv, KvCacheManager::create(CacheGeometry::of(e->config(), cache.max_draft_tokens), cache, /*copies=*/0));
    e->others_.push_back(std::move(kv));
  }
  return e;
}

DistributedExecutor::~DistributedExecutor() {
  StepPlan stop;
  stop.stop = true;
  receive_plan(*world_, &stop);
}

StatusOr<std::vector<SampledLogits>> DistributedExecutor::run(const StepPlan& plan) {
  step_started_ms_ = now_ms();
  receive_plan(*world_, &plan);
  const std::vector<std::vector<char>> results = send_results(*world_, execute(setup_, *world_, plan));
  step_started_ms_ = 0;
  // Each group's first rank has its results in plan order.
  std::vector<GroupResult> groups(num_groups());
  for (int g = 0; g < num_groups(); ++g) {
    const std::vector<char>& bytes = results[g * setup_.topology.tp];
    if (bytes.empty()) continue;
    DSV4_ASSIGN_OR_RETURN(groups[g], deserialize_result(bytes.data(), bytes.size()));
  }
  return merge_group_results(plan, std::move(groups));
}

bool DistributedExecutor::healthy() const {
  const int64_t started = step_started_ms_.load();
  return started == 0 || now_ms() - started < timeout_ms_;
}

Status DistributedExecutor::heartbeat() {
  DSV4_ASSIGN_OR_RETURN(auto none, run(StepPlan{}));
  (void)none;
  return Status::Ok();
}

Status follow_steps(Communicator* world, const DistributedOptions& o) {
  DSV4_ASSIGN_OR_RETURN(RankSetup setup, RankSetup::create(*world, o));
  if (o.on_loaded) o.on_loaded();
  log_info("rank " + std::to_string(world->rank()) + " of " + std::to_string(world->size()) + " ready (" +
           setup.topology.describe() + "), pid " + std::to_string(getpid()));
  for (;;) {
    const StepPlan plan = receive_plan(*world, nullptr);
    if (plan.stop) return Status::Ok();
    send_results(*world, execute(setup, *world, plan));
  }
}

}  // namespace dsv4
