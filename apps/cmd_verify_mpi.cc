// dsv4 verify --dist mpi: the golden protocol with one rank per MPI process,
// the routed experts spread over the processes (each loads only its own).
#include <mpi.h>

#include <cstdio>

#include "dist/mpi_communicator.h"
#include "model/deepseek_v4.h"
#include "model/golden_verify.h"

namespace dsv4::app {

int verify_over_mpi(int argc, char** argv, const std::string& dir, const std::string& golden, int chunk, bool split_heads) {
  auto world = MpiCommunicator::world(&argc, &argv);
  const int rank = world->rank(), size = world->size();
  auto finish = [&](int code) {
    // Every rank reports the worst exit code, so mpirun's status is honest.
    int worst = 0;
    std::vector<int> codes(size);
    world->all_gather(&code, sizeof code, codes.data());
    for (int c : codes) worst = std::max(worst, c);
    world.reset();
    MPI_Finalize();
    return worst;
  };
  ModelOptions mo;
  mo.experts = {rank, size};
  if (split_heads) mo.heads = {rank, size};
  auto model = DeepseekV4::load(dir, mo);
  if (!model.ok()) {
    std::fprintf(stderr, "dsv4 verify (rank %d of %d): %s\n", rank, size, model.status().message().c_str());
    return finish(2);
  }
  (*model)->set_expert_group(world.get());
  if (split_heads) (*model)->set_tensor_group(world.get());
  VerifyOptions opt;
  opt.golden_path = golden.empty() ? dir + "/golden.safetensors" : golden;
  opt.chunk = chunk;
  opt.quantized = model_is_quantized(**model);
  auto report = verify_golden(**model, opt);
  if (!report.ok()) {
    std::fprintf(stderr, "dsv4 verify (rank %d of %d): %s\n", rank, size, report.status().message().c_str());
    return finish(2);
  }
  if (rank == 0)
    std::printf("dsv4 verify over %d MPI ranks (experts%s spread over them)\n  model   %s\n%s", size,
                split_heads ? " and attention heads" : "", dir.c_str(), report->format().c_str());
  return finish(report->pass() ? 0 : 1);
}

}  // namespace dsv4::app
