#pragma once
// The memory a model needs, estimated from its shapes before anything is allocated, so that a
// model too large for the machine is refused with the estimate and the flag to change, instead of
// a bare std::bad_alloc or the kernel's OOM killer halfway through building it.
//
//   parameters   exact: the same count Module::num_parameters() gives once the model is built
//                (tests/test_memory_estimate.cpp checks every architecture, norm and attention kind);
//   state        float32 weights, their gradients and Adam's two moments (4 values a parameter),
//                plus the positional table (float32 and the float64 copy it is made from);
//   activations  what one training step keeps for backward, per padded token of the process's
//                share of --max-tokens: per layer 9 d_model + ff floats (8 d_model + ff for the
//                decoder-only stack), plus 4 d_model for the input. The constants are fitted to the
//                peak resident memory of training runs at two widths (docs/testing.md, "Memory
//                estimates"); it is an estimate, for refusing what cannot fit, not a bound.
// Every product is taken in double, so absurd sizes (--d-model 1e12) give absurd estimates, never
// an integer overflow.
#include <cstdint>
#include <string>

#include "train/run/run_config.h"

namespace gf::train {

// The config's parameter count with these vocabulary sizes (tied weights once).
double parameter_count(const RunConfig& config, int64_t src_vocab, int64_t tgt_vocab);
// The values a checkpoint of that model holds: parameters, a tied weight under both its names,
// and the positional table (pos.pe).
double checkpoint_values(const RunConfig& config, int64_t src_vocab, int64_t tgt_vocab);

struct MemoryEstimate {
  double parameters = 0;
  double state_bytes = 0;       // weights, gradients, Adam state, positional table
  double activation_bytes = 0;  // one training step's, for one process's share of the batch
  double total() const { return state_bytes + activation_bytes; }
};
MemoryEstimate training_memory(const RunConfig& config, int64_t src_vocab, int64_t tgt_vocab, int processes);
// Decoding: the weights, the positional table, and the copy of the weights laid out for decoding
// (nn/decode_layout.h). The KV cache grows with the batch and is not included.
MemoryEstimate decoding_memory(const RunConfig& config, int64_t src_vocab, int64_t tgt_vocab);

// Bytes this process may still allocate: /proc/meminfo's MemAvailable, or less when a cgroup
// (a container, a Slurm job) limits the memory (its limit minus its usage). < 0: unknown.
double available_memory();

// Refuses a training run whose estimate exceeds `max_memory` bytes (0: available_memory()) with
// std::runtime_error naming the flag that weighs most and both figures: "train: --d-model 200000:
// the model needs 1,491 GiB for weights, gradients and Adam state and 60.1 GiB for a step's
// activations; 23.4 GiB are available (--max-memory sets the limit)".
void check_training_memory(const RunConfig& config, int64_t src_vocab, int64_t tgt_vocab, int processes, double max_memory = 0);
// The same for a model about to be built for decoding from `config_file` (Translator::load).
void check_decoding_memory(const RunConfig& config, int64_t src_vocab, int64_t tgt_vocab, const std::string& config_file, double max_memory = 0);

// What one decoding row (a hypothesis: one sentence of a batch, or one of its beam's K) may hold at
// once: its KV cache at the longest a translation grows (self-attention over max_len + 50 target
// tokens and cross-attention over max_len source tokens, or the decoder-only model's 512 positions;
// float32 keys and values of every layer), its scores over the output vocabulary (twice: the
// logits and their contiguous copy), and a layer's activations.
double decoding_row_bytes(const RunConfig& config, int64_t src_vocab, int64_t tgt_vocab);
// Refuses decoding `batch` sentences with `beam` hypotheses each at once when the weights and
// batch x beam rows (decoding_row_bytes) exceed `max_memory` (0: available_memory()), with
// std::runtime_error naming both flags and the figures: "--batch-size 64 x --beam 256 = 16384 rows
// decoded at once need 57.3 GiB for their KV caches and scores beside 403 MiB for the weights;
// 21.0 GiB are available (lower --batch-size or --beam)".
void check_decoding_rows_memory(const RunConfig& config, int64_t src_vocab, int64_t tgt_vocab, int64_t batch, int64_t beam,
                                double max_memory = 0);

// "8G", "512M", "1.5T", "64K", "1000000" (bytes), binary units, an optional "iB"/"B" after the
// letter. Throws std::invalid_argument for anything else, or a size that is not positive.
double parse_memory_size(const std::string& text);
// "412 GiB", "3.1 MiB", "900 bytes".
std::string format_bytes(double bytes);

}  // namespace gf::train
