#pragma once
// Checkpoint averaging (Vaswani et al. 2017 average the last 5 or 20 checkpoints; Marian and
// fairseq do the same): the element-wise mean of several checkpoints' weights, usually the last
// epochs of one run, which sits nearer the middle of the valley the optimizer circles around and
// often translates better than any one of them. The run keeps the last K epochs' weights as
// epoch-NNNN.safetensors when --average-last K is set, and writes their mean as average.safetensors.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tensor/io/safetensors.h"

namespace gf::train {

// The mean of the files' tensors, summed in float64 and stored in each tensor's own dtype, with the
// first file's metadata. Every file must hold the same names with the same shapes and dtypes (the
// error names the first difference and both files).
SafetensorsFile average_weights(const std::vector<std::string>& files);

// The last `last` epoch-NNNN.safetensors files of a run folder (all of them by default), oldest first.
std::vector<std::string> epoch_weight_files(const std::string& dir, size_t last = SIZE_MAX);
std::string epoch_weight_file(const std::string& dir, int64_t epoch);

}  // namespace gf::train
