#include "bench_decode_roofline.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>

#include "bench_throughput.h"
#include "base/thread_pool.h"
#include "checkpoint/config_json.h"
#include "checkpoint/model_loader.h"
#include "checkpoint/v41_loader.h"
#include "model/deepseek_v4.h"
#include "model_source.h"
#include "tools/capacity_plan.h"

namespace dsv4::app {
namespace {

using Clock = std::chrono::steady_clock;

struct Row {
  std::string model, family, numerics;
  double resident = 0, per_token = 0;  // bytes: weights held, weights a decode token reads
  double tok_s = 0;
  double jobs = 0, calls = 0;  // the pool's jobs (wake-up and join each) and parallel_for calls a token
  int layers = 1;
};

// Prefills `ctx` tokens in chunks of 256, then times `gen` greedy decode
// steps; each chunk carries the tokens V4.1's Engram reaches back to.
Status time_decode(const ServingModel& m, ContiguousCache* cache, int64_t ctx, int64_t gen, Row* row) {
  const ModelConfig& c = m.config();
  const int64_t back = c.engram.enabled() ? c.engram.max_ngram_size - 1 : 0;
  std::vector<int32_t> tokens;
  for (int64_t i = 0; i < ctx; ++i) tokens.push_back(static_cast<int32_t>((i * 7919 + 13) % c.vocab_size));
  auto step = [&](int64_t from, int64_t n, int64_t prefill_len, ForwardOutput* out) {
    ForwardBatch batch;
    batch.add(cache, tokens.data() + from, n, prefill_len);
    batch.chunks.back().history.assign(tokens.begin() + (from - std::min(from, back)), tokens.begin() + from);
    return m.forward(batch, out, false);
  };
  ForwardOutput out;
  for (int64_t at = 0; at < ctx; at += 256) DSV4_RETURN_IF_ERROR(step(at, std::min<int64_t>(256, ctx - at), ctx, &out));
  double seconds = 0;
  const ThreadPool& pool = ThreadPool::current();
  int64_t jobs = 0, calls = 0;
  for (int64_t s = -1; s < gen; ++s) {  // step -1: warm-up, not timed
    const float* l = &out.logits[out.logits.size() - c.vocab_size];
    tokens.push_back(static_cast<int32_t>(std::max_element(l, l + c.vocab_size) - l));
    const int64_t jobs0 = pool.jobs(), calls0 = pool.calls();
    const auto t0 = Clock::now();
    DSV4_RETURN_IF_ERROR(step(static_cast<int64_t>(tokens.size()) - 1, 1, 0, &out));
    if (s < 0) continue;
    seconds += std::chrono::duration<double>(Clock::now() - t0).count();
    jobs += pool.jobs() - jobs0;
    calls += pool.calls() - calls0;
  }
  row->tok_s = gen / seconds;
  row->jobs = static_cast<double>(jobs) / gen;
  row->calls = static_cast<double>(calls) / gen;
  row->layers = c.n_layers;
  return Status::Ok();
}

// What dsv4 plan says a V4.1 decode token reads on one rank in `numerics`:
// every dense weight, the routed experts' top-k share, the head, the
// Engram rows.
StatusOr<double> planned_bytes_per_token(const ModelConfig& c, kernels::Numerics numerics) {
  PlanOptions o;
  o.numerics = numerics;
  o.max_model_len = std::min(c.max_position_embeddings, 8192);
  o.kv_cache_bytes = int64_t{1} << 30;
  o.cache.max_num_seqs = 1;
  DSV4_ASSIGN_OR_RETURN(CapacityPlan plan, plan_capacity(c, o));
  return plan.decode_bytes_per_token;
}

Status run_model(const std::string& dir, const DecodeRooflineOptions& o, std::vector<Row>* rows) {
  DSV4_ASSIGN_OR_RETURN(ModelDir source, ModelDir::open(dir));
  DSV4_ASSIGN_OR_RETURN(ModelConfig config, load_any_model_config(source.path() + "/config.json"));
  if (o.ctx + o.gen + 1 > config.max_position_embeddings)
    return invalid_argument(model_name(dir) + " has " + std::to_string(config.max_position_embeddings) +
                            " positions, fewer than --ctx + --gen");
  Row row{model_name(dir), "", "", 0, 0, 0};
  if (config.family == ModelFamily::kV41) {
    row.family = "V4.1";
    for (kernels::Numerics n : o.numerics) {  // a load each: fast packs the weights for good
      DSV4_ASSIGN_OR_RETURN(row.per_token, planned_bytes_per_token(config, n));
      DSV4_ASSIGN_OR_RETURN(std::unique_ptr<DeepseekV41> m, load_deepseek_v41(source.path(), {}, {}, n));
      keep_step_memory();  // as serving does: a step's buffers reuse the last one's pages
      row.resident = static_cast<double>(m->weights().resident_bytes());
      row.numerics = kernels::numerics_name(n);
      auto cache = m->new_cache();
      DSV4_RETURN_IF_ERROR(time_decode(*m, cache.get(), o.ctx, o.gen, &row));
      rows->push_back(row);
    }
    return Status::Ok();
  }
  DSV4_ASSIGN_OR_RETURN(std::unique_ptr<DeepseekV4> m, load_deepseek_v4(source.path(), ModelOptions{}));
  keep_step_memory();
  row.family = "V4";
  row.resident = static_cast<double>(m->weights().resident_bytes());
  row.per_token = decode_bytes_per_token(*m);
  for (kernels::Numerics n : o.numerics) {
    m->set_numerics(n);
    row.numerics = kernels::numerics_name(n);
    ContiguousCache cache = m->new_sequence();
    DSV4_RETURN_IF_ERROR(time_decode(*m, &cache, o.ctx, o.gen, &row));
    rows->push_back(row);
  }
  return Status::Ok();
}

}  // namespace

int bench_decode_roofline(const DecodeRooflineOptions& o) {
  const double before = read_bandwidth();
  std::printf("dsv4 bench: decode at batch 1 after %lld prompt tokens (%lld steps timed), each model against its "
              "memory roofline\nmemory read %.2f GB/s before the rows\n",
              static_cast<long long>(o.ctx), static_cast<long long>(o.gen), before / 1e9);
  std::vector<Row> rows;
  for (const std::string& dir : o.models) {
    Status st = run_model(dir, o, &rows);
    if (!st.ok()) {
      std::fprintf(stderr, "dsv4 bench: %s\n", st.message().c_str());
      return 2;
    }
  }
  const double bandwidth = std::max(before, read_bandwidth());
  std::printf("the roofline uses %.2f GB/s, the higher of the measurements before and after the rows; a decode "
              "token reads the dense weights, the routed experts' top-k share and the head (V4.1: as dsv4 plan "
              "counts them, Engram rows included)\n\n",
              bandwidth / 1e9);
  std::printf("%-40s %-6s %-8s %12s %14s %14s %10s %12s %20s\n", "model", "family", "numerics", "weights MiB",
              "MiB per token", "roofline tok/s", "tok/s", "of roofline", "pool jobs/token");
  for (const Row& r : rows) {
    const double roofline = bandwidth / r.per_token;
    char jobs[64];
    std::snprintf(jobs, sizeof jobs, "%.0f (%.1f a layer)", r.jobs, r.jobs / r.layers);
    std::printf("%-40s %-6s %-8s %12.1f %14.1f %14.2f %10.2f %11.1f%% %20s\n", r.model.c_str(), r.family.c_str(),
                r.numerics.c_str(), r.resident / 1048576.0, r.per_token / 1048576.0, roofline, r.tok_s,
                100.0 * r.tok_s / roofline, jobs);
  }
  std::printf("\npool jobs: parallel_for calls handed to the pool's %d threads in a decode token (each a wake-up "
              "and a join; the rest of the calls ran inline)\n",
              ThreadPool::current().num_threads());
  return 0;
}

}  // namespace dsv4::app
