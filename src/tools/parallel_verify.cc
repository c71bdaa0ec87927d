#include "checkpoint/model_loader.h"
#include "checkpoint/v41_loader.h"
#include "runtime/rank_model.h"
#include "tools/parallel_verify.h"

#include <algorithm>
#include <memory>
#include <thread>

#include "dist/local_communicator.h"
#include "model/deepseek_v4.h"
#include "checkpoint/config_json.h"

namespace dsv4 {

namespace {

// One rank's share of the model with its groups joined. Collective over
// `world`: every rank loads before any steps into a forward, and a load
// that fails anywhere fails every rank.
struct VerifyRank {
  Topology topology;
  RankGroups groups;
  RankModel share;
};

StatusOr<VerifyRank> load_verify_rank(const std::string& dir, const ParallelVerifyOptions& p, Communicator& world) {
  DSV4_ASSIGN_OR_RETURN(ModelConfig config, load_any_model_config(dir + "/config.json"));
  VerifyRank out;
  DSV4_ASSIGN_OR_RETURN(out.topology, Topology::make(p.topology, config, world.size()));
  out.groups = RankGroups::split(world, out.topology);
  ModelOptions mo;
  mo.numerics = p.numerics;
  auto share = load_rank_model(dir, config, mo, p.flashcomm, out.topology, world.rank(), out.groups);
  int loaded = share.ok(), all_loaded = 1;
  std::vector<int> flags(world.size());
  world.all_gather(&loaded, sizeof loaded, flags.data());
  for (int f : flags) all_loaded &= f;
  if (!share.ok()) return share.status();
  if (!all_loaded) return internal_error("another rank could not load its share of the model");
  out.share = std::move(*share);
  return out;
}

// Its DeepSeek-V4 model (the V4 protocols), or an error naming the family.
StatusOr<const DeepseekV4*> v4_of(const VerifyRank& rank) {
  if (!rank.share.v4) return invalid_argument("this protocol runs DeepSeek-V4 checkpoints");
  return rank.share.v4;
}

// Runs on_rank(world communicator of rank r) for every rank of `world` as
// a thread: each rank's result, or the first error.
template <class T, class Fn>
StatusOr<std::vector<T>> run_rank_threads(int world, Fn on_rank) {
  auto comms = LocalCommunicator::create(world);
  std::vector<StatusOr<T>> runs(world, Status(StatusCode::kInternal, "not run"));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) threads.emplace_back([&, r] { runs[r] = on_rank(*comms[r]); });
  for (auto& t : threads) t.join();
  std::vector<T> out;
  for (int r = 0; r < world; ++r) {
    DSV4_RETURN_IF_ERROR(runs[r].status());
    out.push_back(std::move(*runs[r]));
  }
  return out;
}

// Every rank's report must be rank 0's, tensor by tensor.
Status ranks_agree(const std::vector<const VerifyReport*>& reports) {
  const VerifyReport& first = *reports[0];
  for (size_t r = 1; r < reports.size(); ++r) {
    if (reports[r]->tensors.size() != first.tensors.size())
      return internal_error("ranks disagree on the tensors compared: rank 0 " + std::to_string(first.tensors.size()) +
                            ", rank " + std::to_string(r) + " " + std::to_string(reports[r]->tensors.size()));
    for (size_t i = 0; i < first.tensors.size(); ++i)
      if (reports[r]->tensors[i].rel_l2 != first.tensors[i].rel_l2)
        return internal_error("ranks disagree on " + first.tensors[i].name + ": rank 0 " +
                              std::to_string(first.tensors[i].rel_l2) + ", rank " + std::to_string(r) + " " +
                              std::to_string(reports[r]->tensors[i].rel_l2));
  }
  return Status::Ok();
}

// Rank 0's report once every rank's agrees, and the most weight any rank holds.
StatusOr<ParallelVerify> merge_ranks(const Topology& topo, const std::vector<RankVerify>& runs) {
  std::vector<const VerifyReport*> reports;
  for (const RankVerify& run : runs) reports.push_back(&run.report);
  DSV4_RETURN_IF_ERROR(ranks_agree(reports));
  ParallelVerify out;
  out.topology = topo;
  out.report = runs[0].report;
  for (const RankVerify& run : runs) {
    out.weight_bytes_per_rank = std::max(out.weight_bytes_per_rank, run.weight_bytes);
    out.flashcomm_forwards += run.flashcomm_forwards;
  }
  return out;
}

}  // namespace

StatusOr<RankVerify> verify_golden_on_rank(const std::string& dir, const VerifyOptions& options,
                                           const ParallelVerifyOptions& p, Communicator& world) {
  DSV4_ASSIGN_OR_RETURN(VerifyRank rm, load_verify_rank(dir, p, world));
  const Topology& topo = rm.topology;
  const RankGroups& groups = rm.groups;
  DSV4_ASSIGN_OR_RETURN(const DeepseekV4* model, v4_of(rm));
  const int rank = world.rank();
  VerifyOptions o = options;
  o.dp_rank = topo.dp_rank(rank);
  o.dp_size = topo.dp;
  o.merge = groups.peers.get();
  if (model_is_w8a8(*model)) o.bounds = GoldenBounds::w8a8();
  if (rank != 0) o.dump_path.clear();
  DSV4_ASSIGN_OR_RETURN(VerifyReport report, verify_golden(*model, o));
  RankVerify out;
  out.topology = topo;
  out.report = std::move(report);
  out.weight_bytes = model->weights().resident_bytes();
  out.flashcomm_forwards = model->flashcomm_forwards();
  const Communicator* comms[] = {&world, groups.tp.get(), groups.ep.get(), groups.peers.get()};
  for (const Communicator* c : comms) {
    out.traffic.bytes += c->traffic().bytes;
    out.traffic.collectives += c->traffic().collectives;
  }
  return out;
}

StatusOr<ParallelVerify> verify_golden_parallel(const std::string& dir, const VerifyOptions& options,
                                                const ParallelVerifyOptions& p) {
  DSV4_ASSIGN_OR_RETURN(ModelConfig config, load_model_config(dir + "/config.json"));
  DSV4_ASSIGN_OR_RETURN(Topology topo, Topology::make(p.topology, config));
  auto on_rank = [&](Communicator& world) { return verify_golden_on_rank(dir, options, p, world); };
  DSV4_ASSIGN_OR_RETURN(std::vector<RankVerify> runs, run_rank_threads<RankVerify>(topo.world, on_rank));
  DSV4_ASSIGN_OR_RETURN(ParallelVerify out, merge_ranks(topo, runs));
  DSV4_ASSIGN_OR_RETURN(auto single, load_deepseek_v4(dir));
  out.weight_bytes_single = single->weights().resident_bytes();
  return out;
}

StatusOr<RankVerify> verify_v41_golden_on_rank(const std::string& dir, const V41VerifyOptions& options,
                                               const ParallelVerifyOptions& p, Communicator& world) {
  DSV4_ASSIGN_OR_RETURN(VerifyRank rm, load_verify_rank(dir, p, world));
  if (!rm.share.v41) return invalid_argument(dir + " is not a DeepSeek-V4.1 checkpoint");
  RankVerify out;
  out.topology = rm.topology;
  DSV4_ASSIGN_OR_RETURN(out.report, verify_v41_golden(*rm.share.v41, options));
  out.weight_bytes = rm.share.resident_bytes();
  out.flashcomm_forwards = rm.share.v41->flashcomm_forwards();
  return out;
}

StatusOr<ParallelVerify> verify_v41_golden_parallel(const std::string& dir, const V41VerifyOptions& options,
                                                    const ParallelVerifyOptions& p) {
  DSV4_ASSIGN_OR_RETURN(ModelConfig config, load_any_model_config(dir + "/config.json"));
  DSV4_ASSIGN_OR_RETURN(Topology topo, Topology::make(p.topology, config));
  auto on_rank = [&](Communicator& world) { return verify_v41_golden_on_rank(dir, options, p, world); };
  DSV4_ASSIGN_OR_RETURN(std::vector<RankVerify> runs, run_rank_threads<RankVerify>(topo.world, on_rank));
  DSV4_ASSIGN_OR_RETURN(ParallelVerify out, merge_ranks(topo, runs));
  DSV4_ASSIGN_OR_RETURN(auto single, load_deepseek_v41(dir));
  out.weight_bytes_single = single->weights().resident_bytes();
  return out;
}

StatusOr<VerifyReport> verify_dspark_on_rank(const std::string& dir, const DSparkVerifyOptions& options,
                                             const ParallelVerifyOptions& p, Communicator& world) {
  DSV4_ASSIGN_OR_RETURN(ModelConfig config, load_model_config(dir + "/config.json"));
  DSV4_ASSIGN_OR_RETURN(Topology topo, Topology::make(p.topology, config, world.size()));
  if (topo.dp != 1)
    return invalid_argument("a DSpark case runs on one data-parallel group (--tp and --ep layouts, --dp 1)");
  DSV4_ASSIGN_OR_RETURN(VerifyRank rm, load_verify_rank(dir, p, world));
  DSV4_ASSIGN_OR_RETURN(const DeepseekV4* model, v4_of(rm));
  DSparkVerifyOptions o = options;
  if (world.rank() != 0) o.dump_path.clear();
  return verify_dspark(*model, o);
}

StatusOr<VerifyReport> verify_dspark_parallel(const std::string& dir, const DSparkVerifyOptions& options,
                                              const ParallelVerifyOptions& p) {
  DSV4_ASSIGN_OR_RETURN(ModelConfig config, load_model_config(dir + "/config.json"));
  DSV4_ASSIGN_OR_RETURN(Topology topo, Topology::make(p.topology, config));
  auto on_rank = [&](Communicator& world) { return verify_dspark_on_rank(dir, options, p, world); };
  DSV4_ASSIGN_OR_RETURN(std::vector<VerifyReport> runs, run_rank_threads<VerifyReport>(topo.world, on_rank));
  std::vector<const VerifyReport*> reports;
  for (const VerifyReport& run : runs) reports.push_back(&run);
  DSV4_RETURN_IF_ERROR(ranks_agree(reports));
  return std::move(runs[0]);
}

}  // namespace dsv4
