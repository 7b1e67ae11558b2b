#pragma once
// Sums over rows that come out the same for any thread count: the rows are cut into blocks whose
// size depends only on the shape, each block sums its own partials (in double, no races), and the
// partials are then added in block order. Column sums (bias gradients) and layer_norm's weight and
// bias gradients use it, so both threads work even on one 256-wide column strip.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "tensor/parallel.h"

namespace gf::kernels {

struct RowBlocks {
  int64_t rows = 0, block_rows = 1, count = 0;  // count blocks of block_rows rows, the last maybe short
  int64_t begin(int64_t blk) const { return blk * block_rows; }
  int64_t end(int64_t blk) const { return std::min(rows, (blk + 1) * block_rows); }
};

// At most 64 blocks, each of at least a parallel grain of rows costing row_cost elements each.
inline RowBlocks row_blocks(int64_t rows, int64_t row_cost) {
  constexpr int64_t kMaxBlocks = 64;
  RowBlocks b;
  b.rows = rows;
  b.block_rows = std::max(row_grain(row_cost), (rows + kMaxBlocks - 1) / kMaxBlocks);
  b.count = rows == 0 ? 0 : (rows + b.block_rows - 1) / b.block_rows;
  return b;
}

// out[j] = the sum over blocks of part[blk * cols + j] (part: (blocks, cols)), added in block
// order. Parallel over strips of columns; within a strip the blocks' rows are read one after
// another (contiguous and vectorised; reading column by column strode through every block's row
// for each column). No blocks: zeros.
template <class T>
void add_partials_in_order(const std::vector<double>& part, int64_t blocks, int64_t cols, T* out) {
  constexpr int64_t kStrip = 512;  // columns per task: its running totals (4 KiB) stay in L1
  const int64_t strips = (cols + kStrip - 1) / kStrip;
  parallel_for(strips, row_grain(std::max<int64_t>(1, blocks) * kStrip), [&](int64_t lo, int64_t hi) {
    double total[kStrip];
    for (int64_t strip = lo; strip < hi; ++strip) {
      const int64_t j0 = strip * kStrip, n = std::min(kStrip, cols - j0);
      std::fill(total, total + n, 0.0);
      for (int64_t blk = 0; blk < blocks; ++blk) {
        const double* p = part.data() + blk * cols + j0;
        for (int64_t j = 0; j < n; ++j) total[j] += p[j];
      }
      for (int64_t j = 0; j < n; ++j) out[j0 + j] = static_cast<T>(total[j]);
    }
  });
}

}  // namespace gf::kernels
