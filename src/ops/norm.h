// RMS normalization of rows, split over the thread pool.
#pragma once

#include <cstdint>
#include <vector>

namespace dsv4 {

// x[r] = rms_norm(x[r]) * weight, in place, for rows of `dim` values.
void rms_norm_rows(const std::vector<float>& weight, float eps, float* x, int64_t rows, int64_t dim);

}  // namespace dsv4
