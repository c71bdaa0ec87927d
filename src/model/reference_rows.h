// Where each row of a forward would sit in the reference's own tensors.
//
// PyTorch's elementwise loops send the last n % 16 elements of a contiguous
// tensor through libm instead of SLEEF (kernels::simd_element), so a row's
// sigmoid or softplus can round differently depending on the tensor it is
// part of. The reference prefills each prompt in one shot and decodes its
// sequences together. A prompt row is placed in its own prompt's one-shot
// prefill; a decode row as the first row of a two-sequence decode step (the
// reference's runs behind the golden cases). Neither depends on what else
// is in the batch, so the forward is bit-identical to the reference and to
// itself however requests are chunked, packed or batched.
#pragma once

#include <cstdint>
#include <vector>

#include "model/forward_batch.h"

namespace dsv4 {

struct ReferenceRows {
  // A prompt row (position < prefill_len): its position within the
  // sequence's prefill_len rows. A decode row: row 0 of kDecodeRows.
  std::vector<int64_t> index, count;
  static constexpr int64_t kDecodeRows = 2;

  // Element (row, col) of a [rows, width] tensor: (index, n) for simd_element.
  int64_t element(int64_t row, int64_t width, int64_t col) const { return index[row] * width + col; }
  int64_t elements(int64_t row, int64_t width) const { return count[row] * width; }

  // Rows [begin, begin + n).
  ReferenceRows slice(int64_t begin, int64_t n) const {
    ReferenceRows s;
    s.index.assign(index.begin() + begin, index.begin() + begin + n);
    s.count.assign(count.begin() + begin, count.begin() + begin + n);
    return s;
  }

  static ReferenceRows of(const ForwardBatch& batch) {
    ReferenceRows rr;
    const int64_t rows = batch.num_rows();
    rr.index.resize(rows);
    rr.count.resize(rows);
    for (const SeqChunk& ch : batch.chunks) {
      for (int64_t i = 0; i < ch.num_tokens; ++i) {
        const int64_t r = ch.row_begin + i, pos = ch.start_pos + i;
        if (pos < ch.prefill_len) {
          rr.index[r] = pos;
          rr.count[r] = ch.prefill_len;
        } else {
          rr.index[r] = 0;
          rr.count[r] = kDecodeRows;
        }
      }
    }
    return rr;
  }
};

}  // namespace dsv4
