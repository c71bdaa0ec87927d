#include "checkpoint/model_loader.h"
#include "runtime/local_executor.h"

#include "base/logging.h"
#include "dist/local_communicator.h"
#include "checkpoint/config_json.h"

namespace dsv4 {

StatusOr<std::unique_ptr<LocalExecutor>> LocalExecutor::single(const ServingModel* model, const KvCacheOptions& cache) {
  std::unique_ptr<LocalExecutor> e(new LocalExecutor());
  e->config_ = model->config();
  DSV4_ASSIGN_OR_RETURN(e->topology_, Topology::make({}, e->config_));
  DSV4_ASSIGN_OR_RETURN(auto kv, KvCacheManager::create(CacheGeometry::of(e->config_, cache.max_draft_tokens), cache));
  e->workers_.push_back(std::make_unique<RankWorker>(model, &kv->store(), nullptr, 0));
  e->caches_.push_back(std::move(kv));
  e->results_.resize(1, Status(StatusCode::kInternal, "not run"));
  return e;
}

StatusOr<std::unique_ptr<LocalExecutor>> LocalExecutor::own(std::unique_ptr<ServingModel> model,
                                                             const KvCacheOptions& cache) {
  DSV4_ASSIGN_OR_RETURN(std::unique_ptr<LocalExecutor> e, single(model.get(), cache));
  e->owned_ = std::move(model);
  return e;
}

StatusOr<std::unique_ptr<LocalExecutor>> LocalExecutor::create(const std::string& dir, const ModelOptions& base,
                                                                const ParallelOptions& p, const KvCacheOptions& cache) {
  std::unique_ptr<LocalExecutor> e(new LocalExecutor());
  DSV4_ASSIGN_OR_RETURN(e->config_, load_any_model_config(dir + "/config.json"));
  DSV4_ASSIGN_OR_RETURN(e->topology_, Topology::make(p.topology, e->config_));
  const Topology& t = e->topology_;
  // The budget is the process's: every rank here holds a copy of its
  // group's pages.
  KvCacheOptions per_rank = cache;
  DSV4_ASSIGN_OR_RETURN(per_rank.memory_bytes, KvCacheManager::budget_of(cache));
  per_rank.memory_bytes /= t.world;
  for (int g = 0; g < t.dp; ++g) {
    DSV4_ASSIGN_OR_RETURN(auto kv, KvCacheManager::create(CacheGeometry::of(e->config_, cache.max_draft_tokens), per_rank, t.tp));
    e->caches_.push_back(std::move(kv));
  }
  // Splitting the world into groups is collective: every rank at once.
  auto worlds = LocalCommunicator::create(t.world);
  e->ranks_.resize(t.world);
  {
    std::vector<std::thread> split;
    for (int r = 0; r < t.world; ++r)
      split.emplace_back([&, r] { e->ranks_[r].groups = RankGroups::split(*worlds[r], t); });
    for (auto& th : split) th.join();
  }
  if (!p.placement.empty() && static_cast<int>(p.placement.size()) != t.world)
    return invalid_argument("a placement of " + std::to_string(p.placement.size()) + " ranks for " +
                            std::to_string(t.world));
  for (int r = 0; r < t.world; ++r) {
    Rank& rank = e->ranks_[r];
    rank.world = std::move(worlds[r]);
    if (!p.placement.empty() && p.placement[r].node >= 0 && !p.placement[r].cpus.empty()) {
      rank.pool = p.rank_pools ? p.rank_pools(r) : rank_pool(p.placement[r]);
      rank.first_cpu = p.rank_pools ? -1 : p.placement[r].cpus.front();
    }
    // Loaded on the rank's cores: the pages its loader threads first touch
    // are on its node.
    Status loaded = Status::Ok();
    e->on_rank(r, [&] {
      auto share = load_rank_model(dir, e->config_, base, p.flashcomm, t, r, rank.groups);
      if (share.ok()) rank.share = std::move(*share);
      else loaded = share.status();
    });
    DSV4_RETURN_IF_ERROR(loaded);
    const int g = t.dp_rank(r);
    if (rank.pool) e->bind_to_node(p, r, &e->caches_[g]->store(t.tp_rank(r)));
    e->workers_.push_back(std::make_unique<RankWorker>(rank.share.model.get(), &e->caches_[g]->store(t.tp_rank(r)),
                                                       t.tp > 1 ? rank.groups.tp.get() : nullptr, g));
  }
  e->results_.resize(t.world, Status(StatusCode::kInternal, "not run"));
  if (t.world > 1 || e->ranks_[0].pool) e->start_threads();
  return e;
}

void LocalExecutor::bind_to_node(const ParallelOptions& p, int r, const PageStore* pages) {
  const int node = p.placement[r].node;
  MemoryBinding* binding = p.memory;
  if (!binding) {
    if (!hwloc_binding_) {
      auto made = HwlocMemoryBinding::create();
      if (!made.ok()) return log_warn("ranks' memory is not bound to their nodes: " + made.status().message());
      hwloc_binding_ = std::move(*made);
    }
    binding = hwloc_binding_.get();
  }
  // What cannot be bound stays where the rank's threads first touched it.
  Status s = bind_rank_weights(ranks_[r].share, *binding, node);
  pages->for_each_region([&](const void* at, int64_t bytes) {
    if (s.ok()) s = binding->bind(at, static_cast<size_t>(bytes), node);
  });
  if (!s.ok()) log_warn("rank " + std::to_string(r) + ": " + s.message());
}

void LocalExecutor::on_rank(int r, const std::function<void()>& fn) {
  const Rank& rank = ranks_[r];
  if (!rank.pool) return fn();
  std::thread th([&] {
    if (rank.first_cpu >= 0)
      if (Status s = pin_thread_to(rank.first_cpu); !s.ok()) log_warn(s.message());
    ThreadPool::Scope scope(rank.pool.get());
    fn();
  });
  th.join();
}

LocalExecutor::~LocalExecutor() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  start_.notify_all();
  for (auto& t : threads_) t.join();
}

void LocalExecutor::start_threads() {
  for (int r = 0; r < static_cast<int>(workers_.size()); ++r) threads_.emplace_back([this, r] { rank_loop(r); });
}

void LocalExecutor::rank_loop(int rank) {
  // A placed rank steps on its node's cores, with its own pool.
  const Rank* placed = rank < static_cast<int>(ranks_.size()) && ranks_[rank].pool ? &ranks_[rank] : nullptr;
  if (placed && placed->first_cpu >= 0)
    if (Status s = pin_thread_to(placed->first_cpu); !s.ok()) log_warn(s.message());
  ThreadPool::Scope scope(placed ? placed->pool.get() : &ThreadPool::current());
  int64_t seen = 0;
  for (;;) {
    const StepPlan* plan = nullptr;
    {
      std::unique_lock<std::mutex> lock(mu_);
      start_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
      plan = plan_;
    }
    StatusOr<GroupResult> result = workers_[rank]->execute(*plan);
    std::lock_guard<std::mutex> lock(mu_);
    results_[rank] = std::move(result);
    if (--pending_ == 0) done_.notify_all();
  }
}

StatusOr<std::vector<SampledLogits>> LocalExecutor::run(const StepPlan& plan) {
  if (threads_.empty()) {
    results_[0] = workers_[0]->execute(plan);
  } else {
    std::unique_lock<std::mutex> lock(mu_);
    plan_ = &plan;
    pending_ = static_cast<int>(workers_.size());
    ++generation_;
    start_.notify_all();
    done_.wait(lock, [&] { return pending_ == 0; });
  }
  for (const auto& r : results_) DSV4_RETURN_IF_ERROR(r.status());
  // Each group's first rank has its results in plan order.
  std::vector<GroupResult> groups(num_groups());
  for (int g = 0; g < num_groups(); ++g) groups[g] = std::move(*results_[g * topology_.tp]);
  return merge_group_results(plan, std::move(groups));
}

std::vector<Communicator::Traffic> LocalExecutor::traffic() const {
  std::vector<Communicator::Traffic> out;
  for (const Rank& r : ranks_) {
    Communicator::Traffic t;
    for (const Communicator* c : {r.world.get(), r.groups.tp.get(), r.groups.ep.get(), r.groups.peers.get()}) {
      t.bytes += c->traffic().bytes;
      t.collectives += c->traffic().collectives;
    }
    out.push_back(t);
  }
  return out;
}

}  // namespace dsv4
