// dsv4 verify --dist mpi: the golden protocol with one rank per MPI process
// in the --tp x --dp topology (each process loads only its share).
#include <mpi.h>

#include <algorithm>
#include <cstdio>

#include "checkpoint/config_json.h"
#include "dist/mpi_communicator.h"
#include "model/deepseek_v4.h"
#include "tools/dspark_verify.h"
#include "tools/golden_verify.h"
#include "tools/parallel_verify.h"
#include "tools/v41_golden_verify.h"

namespace dsv4::app {

int verify_over_mpi(int argc, char** argv, const std::string& dir, const std::string& golden, int chunk,
                    const ParallelVerifyOptions& parallel) {
  auto world = MpiCommunicator::world(&argc, &argv);
  const int rank = world->rank(), size = world->size();
  auto finish = [&](int code) {
    // Every rank reports the worst exit code, so mpirun's status is honest.
    std::vector<int> codes(size);
    world->all_gather(&code, sizeof code, codes.data());
    const int worst = *std::max_element(codes.begin(), codes.end());
    world.reset();
    MPI_Finalize();
    return worst;
  };
  VerifyOptions opt;
  opt.golden_path = golden.empty() ? dir + "/golden.safetensors" : golden;
  opt.chunk = chunk;
  if (auto config = load_any_model_config(dir + "/config.json"); config.ok() && config->family == ModelFamily::kV41) {
    // Every data-parallel group runs every prompt; each rank checks its own
    // report, rank 0 prints its.
    auto bounds = GoldenBounds::for_run(opt.golden_path, parallel.numerics, /*w8a8=*/false);
    if (!bounds.ok()) {
      std::fprintf(stderr, "dsv4 verify: %s\n", bounds.status().message().c_str());
      return finish(2);
    }
    auto run = verify_v41_golden_on_rank(dir, {opt.golden_path, chunk, false, *bounds}, parallel, *world);
    if (!run.ok()) {
      std::fprintf(stderr, "dsv4 verify (rank %d of %d): %s\n", rank, size, run.status().message().c_str());
      return finish(2);
    }
    if (rank == 0)
      std::printf("dsv4 verify over %d MPI ranks (%s), numerics %s\n  model   %s\n  weights %.2f MiB on rank 0\n%s",
                  size, run->topology.describe().c_str(), kernels::numerics_name(parallel.numerics), dir.c_str(),
                  run->weight_bytes / 1048576.0,
                  run->report.format().c_str());
    return finish(run->report.pass() ? 0 : 1);
  }
  if (is_dspark_golden(opt.golden_path)) {
    // Both protocols of a DSpark case; rank 0 reports.
    bool pass = true;
    for (bool end_to_end : {false, true}) {
      DSparkVerifyOptions o;
      o.golden_path = opt.golden_path;
      o.end_to_end = end_to_end;
      o.chunk = chunk;
      auto report = verify_dspark_on_rank(dir, o, parallel, *world);
      if (!report.ok()) {
        std::fprintf(stderr, "dsv4 verify (rank %d of %d): %s\n", rank, size, report.status().message().c_str());
        return finish(2);
      }
      if (rank == 0)
        std::printf("dsv4 verify (DSpark drafter) over %d MPI ranks, numerics %s\n  model   %s\n%s\n%s", size,
                    kernels::numerics_name(parallel.numerics), dir.c_str(),
                    end_to_end ? "end to end: the target's own taps" : "drafter fed the golden taps",
                    report->format().c_str());
      pass &= report->pass();
    }
    return finish(pass ? 0 : 1);
  }
  auto bounds = GoldenBounds::for_run(opt.golden_path, parallel.numerics, false);  // W8A8: verify_golden_on_rank
  if (!bounds.ok()) {
    std::fprintf(stderr, "dsv4 verify (rank %d of %d): %s\n", rank, size, bounds.status().message().c_str());
    return finish(2);
  }
  opt.bounds = *bounds;
  auto run = verify_golden_on_rank(dir, opt, parallel, *world);
  if (!run.ok()) {
    std::fprintf(stderr, "dsv4 verify (rank %d of %d): %s\n", rank, size, run.status().message().c_str());
    return finish(2);
  }
  if (rank == 0)
    std::printf("dsv4 verify over %d MPI ranks (%s%s), numerics %s\n  model   %s\n  weights %.2f MiB on rank 0\n%s",
                size, run->topology.describe().c_str(), parallel.flashcomm.enabled ? ", FlashComm1" : "",
                kernels::numerics_name(parallel.numerics), dir.c_str(), run->weight_bytes / 1048576.0,
                run->report.format().c_str());
  return finish(run->report.pass() ? 0 : 1);
}

}  // namespace dsv4::app
