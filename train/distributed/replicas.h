#pragma once
// Keeping the processes of a data-parallel run identical, or stopping loudly when they are not.
//
// At the start every process builds its own run config, vocabularies, encoded training pairs and
// batch plan from the same data; nothing but this check says they came out the same (a different
// file on one machine, another --max-len on one rank of an MPMD launch). agree_on_setup compares
// a digest of each across the processes and stops all of them, naming every rank that differs
// and what, before any weights are exchanged.
//
// Then every process makes the same update from the same summed gradient, so the weights stay
// equal without being sent again. check_replicas confirms it once an epoch: a digest of every
// process's weights and optimizer state, compared exactly; should any differ, rank 0's are sent
// to all and a warning names the ranks. Every decision is taken from agreed values, so every
// process makes the same calls and none can wait alone in a collective (weights that are NaN on
// one process included).
#include <cstdint>
#include <string>
#include <vector>

#include "autograd/variable.h"
#include "optim/adam.h"

namespace gf::train::distributed {

// A 64-bit digest of bytes, and of the bytes of several tensors in order (dtype and shape included).
uint64_t digest_bytes(const void* data, size_t n, uint64_t seed = 0);
uint64_t digest_tensors(const std::vector<Tensor>& tensors, uint64_t seed = 0);

// What one process built, each part as a digest and a count that the error message shows.
struct SetupDigest {
  struct Part {
    const char* what;  // "the run config", "the source vocabulary", ...
    uint64_t digest;
    int64_t count;  // bytes, tokens, pairs or batches
    const char* unit;
  };
  std::vector<Part> parts;  // the same parts, in the same order, on every process
};

// Compares every process's digest with rank 0's. On any difference every process throws
// AgreedError; rank 0's message names each differing rank and part ("rank 1 differs from rank 0
// in its source vocabulary (812 tokens against 815)"). One process: nothing to compare.
void agree_on_setup(const SetupDigest& mine);

// Rank 0's weights (and optimizer state) to every process, bit for bit.
void share_weights(const std::vector<Variable>& params);
void share_optimizer_state(optim::Adam& adam);

// Compares the processes' weights and optimizer state exactly; when they differ, sends rank 0's to
// all and returns the ranks that differed from rank 0 (on rank 0; the others get an empty list
// either way, or {-1} when a difference was found and fixed). Empty: every process agreed.
std::vector<int> check_replicas(const std::vector<Variable>& params, optim::Adam& adam);

}  // namespace gf::train::distributed
