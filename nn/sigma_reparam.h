#pragma once
// σReparam (Zhai et al. 2023, arXiv:2303.06296): a weight W used as (γ / σ(W)) W, σ(W) its spectral
// norm and γ a learned scalar, so that the used weight's spectral norm is γ however W grows. The
// modules that offer it (Linear, MultiheadAttention) keep, per weight, γ as a parameter (1) and
// the power iteration's right singular vector u as a buffer; these are the shared pieces.
//
// σ(W) is estimated as in the paper's reference code: from the stored u, one power-iteration step
// v = W u / |W u|, u' = W^T v / |W^T v|, then σ = v^T W u', with the gradient reaching W through
// σ with u' and v held fixed. u' replaces u only when the step belongs to training (`advance`).
// Under Adam every entry of W moves by about the learning rate per step, so σ(W) can grow by about
// lr * sqrt(rows * cols) per step; γ moves by about lr.
#include <vector>

#include "autograd/variable.h"

namespace gf::nn::sigma_reparam {

// Converges u (cols) on w (rows, cols) by many power-iteration steps from a fixed start and
// returns σ(w), the value γ starts from (so that the reparametrised weight equals w at first).
// Throws std::invalid_argument for a zero w.
double initial_sigma(const Tensor& w, std::vector<double>& u);
// (γ / σ(W)) W for W (rows, cols), u the stored vector (cols; advanced in place when `advance`),
// gamma (1).
Variable reparametrise(const Variable& w, Tensor u, const Variable& gamma, bool advance);

}  // namespace gf::nn::sigma_reparam
