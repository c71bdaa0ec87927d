// Run under mpiexec: every collective of the MPI backend, the same checks as
// the threads backend, bit for bit.
#include <mpi.h>

#include <cstdio>
#include <vector>

#include "collective_checks.h"
#include "dist/mpi_communicator.h"

int main(int argc, char** argv) {
  auto world = dsv4::MpiCommunicator::world(&argc, &argv);
  const std::string failure = dsv4::testing::run_collective_checks(*world);
  if (!failure.empty()) std::fprintf(stderr, "%s\n", failure.c_str());
  int bad = failure.empty() ? 0 : 1, any = 0;
  std::vector<int> flags(world->size());
  world->all_gather(&bad, sizeof bad, flags.data());
  for (int f : flags) any |= f;
  if (world->rank() == 0) std::printf("%s: %d MPI ranks\n", any ? "FAIL" : "ok", world->size());
  world.reset();
  MPI_Finalize();
  return any;
}
