// Checks every collective of a Communicator; shared by the threads test and
// the MPI test (tests/mpi_collectives.cc, run under mpiexec). Returns an
// empty string when all hold, else the first failure.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "dist/communicator.h"

namespace dsv4::testing {

inline float check_value(int rank, int i) { return std::sin(0.37f * i + rank) * std::pow(10.0f, (i + rank) % 7 - 3); }

inline std::string run_collective_checks(Communicator& c) {
  const int me = c.rank(), size = c.size();
  auto fail = [&](const std::string& what) { return "rank " + std::to_string(me) + ": " + what; };
  // all_reduce: rank-order sum, bit for bit.
  const int n = 1000;
  std::vector<float> x(n), expect(n);
  for (int i = 0; i < n; ++i) {
    x[i] = check_value(me, i);
    float s = check_value(0, i);
    for (int r = 1; r < size; ++r) s += check_value(r, i);
    expect[i] = s;
  }
  c.all_reduce_sum(x.data(), n);
  if (x != expect) return fail("all_reduce_sum is not the rank-order sum");
  // all_gather
  int64_t mine[2] = {me, me * 10};
  std::vector<int64_t> all(2 * size);
  c.all_gather(mine, sizeof mine, all.data());
  for (int r = 0; r < size; ++r)
    if (all[2 * r] != r || all[2 * r + 1] != r * 10) return fail("all_gather");
  // all_gather_v: rank r sends r + 1 ints of 7 * r + k.
  std::vector<int32_t> mine_v(me + 1), all_v(size * (size + 1) / 2);
  std::vector<size_t> bytes_v(size);
  for (int k = 0; k <= me; ++k) mine_v[k] = 7 * me + k;
  for (int r = 0; r < size; ++r) bytes_v[r] = sizeof(int32_t) * (r + 1);
  c.all_gather_v(mine_v.data(), bytes_v, all_v.data());
  for (int r = 0, at = 0; r < size; ++r)
    for (int k = 0; k <= r; ++k)
      if (all_v[at++] != 7 * r + k) return fail("all_gather_v");
  // all_gather_rows: 3 rows of 2 ints a rank into rows of 2 * size + 1
  // ints (the last one untouched).
  const int row_ints = 2 * size + 1;
  int32_t mine_rows[6];
  for (int i = 0; i < 6; ++i) mine_rows[i] = 100 * me + i;
  std::vector<int32_t> rows_out(3 * row_ints, -1);
  c.all_gather_rows(mine_rows, 3, 2 * sizeof(int32_t), rows_out.data(), row_ints * sizeof(int32_t));
  for (int i = 0; i < 3; ++i) {
    for (int r = 0; r < size; ++r)
      for (int j = 0; j < 2; ++j)
        if (rows_out[i * row_ints + 2 * r + j] != 100 * r + 2 * i + j) return fail("all_gather_rows");
    if (rows_out[i * row_ints + 2 * size] != -1) return fail("all_gather_rows wrote past a row's parts");
  }
  // broadcast from the last rank
  double v = me == size - 1 ? 3.25 : 0.0;
  c.broadcast(&v, sizeof v, size - 1);
  if (v != 3.25) return fail("broadcast");
  // all_to_all_v: rank i sends (i + j) ints of 100 * i + j to rank j.
  std::vector<int32_t> send;
  std::vector<size_t> sb(size), rb(size);
  size_t total = 0;
  for (int j = 0; j < size; ++j) {
    for (int k = 0; k < me + j; ++k) send.push_back(100 * me + j);
    sb[j] = 4 * (me + j);
    rb[j] = 4 * (j + me);
    total += j + me;
  }
  std::vector<int32_t> recv(total);
  c.all_to_all_v(send.data(), sb, recv.data(), rb);
  size_t at = 0;
  for (int j = 0; j < size; ++j)
    for (int k = 0; k < j + me; ++k)
      if (recv[at++] != 100 * j + me) return fail("all_to_all_v");
  // reduce_scatter over 2 * size + 1 values: uneven, padded.
  const int64_t m = 2 * size + 1, chunk = (m + size - 1) / size;
  std::vector<float> y(m), part(chunk);
  for (int64_t i = 0; i < m; ++i) y[i] = static_cast<float>(i + me);
  const int64_t got = c.reduce_scatter_sum_padded(y.data(), m, part.data());
  const int64_t begin = std::min<int64_t>(m, chunk * me), count = std::min<int64_t>(m, begin + chunk) - begin;
  if (got != count) return fail("reduce_scatter count");
  for (int64_t i = 0; i < got; ++i) {
    float s = 0.0f;
    for (int r = 0; r < size; ++r) s += static_cast<float>(begin + i + r);
    if (part[i] != s) return fail("reduce_scatter value");
  }
  // Sub-groups: pairs of consecutive ranks.
  auto pair = c.split(me / 2, me % 2);
  float z = static_cast<float>(me);
  pair->all_reduce_sum(&z, 1);
  const float pair_sum = me / 2 * 2 + (me / 2 * 2 + 1 < size ? me / 2 * 2 + 1 : 0);
  if (z != pair_sum) return fail("split group all_reduce");
  c.barrier();
  return "";
}

}  // namespace dsv4::testing
