// Which attention heads does the loss reach? A two-layer causal self-attention model (embedding,
// two attention layers with residuals, output projection) runs one batch of a next-token task;
// each layer's attention weights A (B, H, L, S) keep their gradient (retain_grad), and a hook
// records the order in which backward reaches them. The table: |dL/dA| per head, and how peaked
// the head's attention is (mean over rows of the largest weight).
#include <gradflow/gradflow.h>

#include <cmath>

using namespace gf;

int main() {
  const int64_t B = 16, L = 10, D = 32, H = 4, V = 40;
  Generator gen(1);
  nn::Embedding emb(V, D, -1, gen);
  nn::MultiheadAttention attn1(D, H, 0.0, true, gen), attn2(D, H, 0.0, true, gen);
  nn::Linear out(D, V, true, gen);

  // Tokens 0..V-1 at random; the label of position i is the token at i - 1 (position 0: itself).
  Tensor tokens = Tensor::empty({B, L}, DType::Int64), labels = Tensor::empty({B * L}, DType::Int64);  // (B, L), (B*L)
  for (int64_t i = 0; i < B * L; ++i) tokens.flat_set(i, static_cast<double>(gen.next_below(V)));
  for (int64_t i = 0; i < B * L; ++i) labels.flat_set(i, tokens.flat_get(i % L == 0 ? i : i - 1));

  const Tensor causal = nn::make_causal_mask(L);                    // (L, L)
  Variable x = emb.forward(tokens);                                 // (B, L, D)
  nn::AttentionResult a1 = attn1.forward(x, x, x, Tensor(), causal, /*need_weights=*/true);
  Variable h1 = x + a1.output;                                      // (B, L, D)
  nn::AttentionResult a2 = attn2.forward(h1, h1, h1, Tensor(), causal, true);
  Variable h2 = h1 + a2.output;                                     // (B, L, D)
  Variable loss = cross_entropy(reshape(out.forward(h2), {B * L, V}), labels);  // ()

  std::vector<std::string> order;
  for (auto [name, a] : {std::pair{"layer 1", &a1}, {"layer 2", &a2}}) {
    a->weights.retain_grad();  // an intermediate tensor keeps .grad after backward
    a->weights.register_hook([&order, name](const Tensor&) { order.push_back(name); return Tensor(); });
  }
  loss.backward();
  fmt::print("loss {:.4f} (ln {} = {:.4f} for a uniform guess); backward reached {} first, then {}\n\n", loss.item(), V,
             std::log(static_cast<double>(V)), order.at(0), order.at(1));

  fmt::print("layer  head  |dL/dA|     share  mean max weight\n");
  for (auto [layer, a] : {std::pair{1, &a1}, {2, &a2}}) {
    const Tensor w = a->weights.data().contiguous(), g = a->weights.grad().contiguous();  // (B, H, L, L)
    std::vector<double> norm(H), peak(H);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < L; ++i) {
          double row_max = 0;
          for (int64_t j = 0; j < L; ++j) {
            const int64_t k = ((b * H + h) * L + i) * L + j;
            norm[h] += g.flat_get(k) * g.flat_get(k);
            row_max = std::max(row_max, w.flat_get(k));
          }
          peak[h] += row_max / (B * L);
        }
    double total = 0;
    for (double& n : norm) total += (n = std::sqrt(n));
    for (int64_t h = 0; h < H; ++h) fmt::print("{:5d}  {:4d}  {:.3e}  {:5.1f}%  {:.3f}\n", layer, h, norm[h], 100 * norm[h] / total, peak[h]);
  }
  return 0;
}
