#include "ops/norm.h"

#include "base/thread_pool.h"
#include "kernels/kernels.h"

namespace dsv4 {

void rms_norm_rows(const std::vector<float>& weight, float eps, float* x, int64_t rows, int64_t dim) {
  parallel_for(rows, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) kernels::rms_norm(x + r * dim, weight.data(), dim, eps, x + r * dim);
  });
}

}  // namespace dsv4
