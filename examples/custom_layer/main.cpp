// A feed-forward layer written outside gradflow, plugged into its translator by name:
//   1. SwiGLU (Shazeer 2020, "GLU Variants Improve Transformer"): w2(dropout(silu(w1 x) * w3 x)),
//      with Llama's parameter names, composed from gradflow's differentiable ops;
//   2. its float64 gradient check against central differences (gf::gradcheck);
//   3. registered as the feed-forward kind "swiglu" (nn::register_feedforward);
//   4. trained in gradflow's translator (gf::train::train_translator) on the built-in English->Korean
//      corpus, then the trained run folder loaded back and asked for a translation.
//
//   custom_layer [--steps N] [--out DIR]     (default: 1200 steps into runs/swiglu)
#include <gradflow/gradflow.h>
#include <gradflow/korean/builtin_corpus.h>

#include <cstdlib>
#include <cstring>
#include <string>

using namespace gf;

// SwiGLU feed-forward block: (..., d_model) -> (..., d_model). The paper's FFN_SwiGLU has no biases.
class SwiGLU : public nn::FeedForward {
 public:
  SwiGLU(const nn::TransformerLayerOptions& o, Generator& gen) {
    w1 = register_module("w1", std::make_shared<nn::Linear>(o.d_model, o.dim_feedforward, false, gen));  // gate
    w3 = register_module("w3", std::make_shared<nn::Linear>(o.d_model, o.dim_feedforward, false, gen));  // value
    w2 = register_module("w2", std::make_shared<nn::Linear>(o.dim_feedforward, o.d_model, false, gen));  // out
    dropout = register_module("dropout", std::make_shared<nn::Dropout>(o.dropout));
  }
  Variable forward(const Variable& x) const override {
    Variable g = w1->forward(x);                   // (..., ff)
    Variable h = g * sigmoid(g) * w3->forward(x);  // (..., ff): Swish_1(x W) * (x V)
    return w2->forward(dropout->forward(h));       // (..., d_model)
  }
  std::shared_ptr<nn::Linear> w1, w3, w2;
  std::shared_ptr<nn::Dropout> dropout;
};

// d(sum(SwiGLU(x) * v)) / d(x, w1, w3, w2), analytic against central differences, in float64.
bool check_gradients() {
  nn::TransformerLayerOptions o;
  o.d_model = 6, o.dim_feedforward = 5, o.dropout = 0;
  Generator gen(7);
  SwiGLU block(o, gen);
  block.to(DType::Float64);
  Tensor x = kernels::uniform({2, 3, 6}, -1.0, 1.0, gen, DType::Float64);  // (B, L, D)
  std::vector<Variable> inputs{Variable(x, true)};
  for (const Variable& p : block.parameters()) inputs.push_back(p);  // w1, w3, w2
  auto f = [&](const std::vector<Variable>& in) { return block.forward(in[0]); };
  GradcheckResult r = gradcheck(f, inputs);
  fmt::print("gradcheck (float64, input and w1, w3, w2): {}; worst |analytic - numeric| {:.2e}\n", r.ok ? "ok" : "FAILED", r.worst_abs);
  if (!r.ok) fmt::print("  {}\n", r.report);
  return r.ok;
}

int main(int argc, char** argv) {
  int64_t steps = 1200;
  std::string out = "runs/swiglu";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--steps")) steps = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--out")) out = argv[i + 1];
    else return fmt::print(stderr, "usage: custom_layer [--steps N] [--out DIR]\n"), 2;
  }
  if (!check_gradients()) return 1;

  nn::register_feedforward({"swiglu", "SwiGLU: w2(silu(w1 x) * w3 x) (Shazeer 2020)",
                            [](const nn::TransformerLayerOptions& o, Generator& gen) -> std::shared_ptr<nn::FeedForward> {
                              return std::make_shared<SwiGLU>(o, gen);
                            }});
  fmt::print("feed-forward kinds: {}\n\n", nn::feedforward_names());

  // The built-in corpus with the model `gradflow train` uses for it, SwiGLU in every layer. Its
  // hidden width is 2/3 of the standard block's 512, as the paper does, so that the three matrices
  // hold as many weights as the standard block's two.
  train::RunConfig c;
  c.src = "en", c.tgt = "ko", c.min_freq = 1;
  c.layer.d_model = 128, c.layer.nhead = 4, c.layers = 2, c.layer.dim_feedforward = 344;
  c.layer.feedforward = "swiglu";
  c.lr = 2e-3, c.warmup = 400, c.steps = steps;
  train::TrainOptions opt;
  opt.builtin_corpus = train::korean_run_data;  // c names no --data: the built-in corpus, from gradflow::korean
  opt.out = out;
  opt.samples = 2;
  train::TrainResult r = train::train_translator(c, opt);

  fmt::print("\nloss by step:");
  const size_t n = r.step_losses.size();
  for (size_t i = 0; i < n; i += std::max<size_t>(1, n / 6)) fmt::print(" {}: {:.3f},", r.step_losses[i].first, r.step_losses[i].second);
  fmt::print(" {}: {:.3f}\n", r.step_losses.back().first, r.step_losses.back().second);

  // The run folder's config.json names "swiglu": loading it rebuilds the model through the registry.
  train::Translator t = train::Translator::load(out);
  const std::string sentence = "my friend read a book in the library yesterday .";
  fmt::print("{}\n  -> {}\n", sentence, t.translate({sentence}, t.default_decode_options())[0]);
  return 0;
}
