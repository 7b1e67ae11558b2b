#pragma once
// Attention maps as plain numbers in double, and what is read from them: one map per head of an
// attention's weights, the mean over heads, products, and attention rollout.
//
// Attention rollout (Abnar and Zuidema 2020). Every attention layer is averaged over its heads and
// mixed half and half with the identity, for the residual connection: A~ = 0.5 mean_h(A_h) + 0.5 I
// (rows sum to 1).
//  - One stack of self-attention (a decoder-only model): R = A~_L ... A~_1 (stack_rollout).
//  - An encoder-decoder, carried through the decoder (attention_rollout): the encoder's rollout is
//    R = A~_L ... A~_1 (S x S). Each target position carries a distribution P over the inputs,
//    source tokens and target tokens, (T, S + T), starting at its own target token; each decoder
//    layer updates it as its sub-layers mix the states:
//      self-attention:   P <- A~_self P                             (mixes target positions)
//      cross-attention:  P <- 0.5 P + 0.5 mean_h(C_h) [R | 0]       (pulls in the encoder's output)
//    (the feed-forward blocks act on each position alone and are left out, as in the paper). Rows
//    of P sum to 1; the rollout map is P's source part, each row divided by its sum (the source
//    share, reported too).
#include <vector>

#include "tensor/tensor.h"

namespace gf::train::inspect {

using Map = std::vector<std::vector<double>>;  // (rows, cols)

// Row 0 of a (B, H, L, S) attention-weights tensor as H maps (L, S), in double.
std::vector<Map> heads_of(const Tensor& w);
// The matrix product a (n, k) times b (k, m): (n, m).
Map map_product(const Map& a, const Map& b);
// Mean over heads: (rows, cols).
Map head_mean(const std::vector<Map>& heads);
// |x| of every entry.
Map abs_map(const Map& m);
// Total variation distance between two distributions: half the sum of |a - b|, in [0, 1].
double total_variation(const std::vector<double>& a, const std::vector<double>& b);

struct Rollout {
  Map source;                        // (T, S): rows sum to 1
  std::vector<double> source_share;  // (T): P's source part before normalising, in (0, 1]
  Map encoder;                       // (S, S): R, the encoder's rollout
};
// enc_self: per encoder layer (S, S), dec_self: per decoder layer (T, T), cross: per decoder layer
// (T, S), each already averaged over heads. Throws std::invalid_argument on inconsistent sizes.
Rollout attention_rollout(const std::vector<Map>& enc_self, const std::vector<Map>& dec_self, const std::vector<Map>& cross);

// The rollout of a stack of self-attention layers, each already averaged over its heads (L, L):
// R = (0.5 A_n + 0.5 I) ... (0.5 A_1 + 0.5 I). Rows sum to 1 when each A's rows do.
Map stack_rollout(const std::vector<Map>& layers);

}  // namespace gf::train::inspect
