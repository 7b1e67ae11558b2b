#pragma once
// How a data-parallel run shares out a step's global batch. The BatchPlan is built with the global
// token limit (--max-tokens per process times the processes), so every run, whatever its number of
// processes, visits the same global batches in the same order. A global batch's rows are sorted by
// length (train/data/batching.h); they are cut into `parts` consecutive runs of about equal target
// tokens: run r ends at the row boundary nearest to where the running count of target tokens
// reaches (r+1)/parts of the batch's (at least one row each, and one left for each later run while
// rows remain); the last run takes the rest. Process r takes run r and pads it on its own. With
// fewer rows than processes, the last processes get none.
#include <cstddef>
#include <utility>
#include <vector>

#include "train/data/batching.h"

namespace gf::train::distributed {

// [begin, end) of each part over rows with these target-token counts; parts >= 1.
std::vector<std::pair<size_t, size_t>> split_rows(const std::vector<int64_t>& row_tokens, int parts);

// Part `part` of `parts` of a global batch of `pairs`, collated on its own; rows == 0 when empty.
Batch batch_part(const std::vector<EncodedPair>& pairs, const Batch& global, int part, int parts);

}  // namespace gf::train::distributed
