// Lab `norm`: Post-LN against Pre-LN gradients (Xiong et al. 2020, arXiv:2002.04745).
//
// The paper (Theorem 1, Figure 3): at initialisation, the gradient of the FFN's second weight
// W^2 (here `linear2.weight`) of a Post-LN Transformer grows toward the output layers, and that of
// the last layer does not shrink with depth, O(d sqrt(ln d)); with the LayerNorm inside the
// residual branch (Pre-LN, with a final LayerNorm on each stack) the gradients are about the same
// in every layer and the last layer's falls as O(d sqrt(ln d / L)). Hence Post-LN needs a
// learning-rate warm-up, Pre-LN much less.
//
// Here: the per-layer gradient norm of a 6+6-layer translator on the built-in English -> Korean
// corpus, for several initialisations and batches; the last layer's gradient against depth; and
// short training runs at a high learning rate: Post-LN at every warm-up length of --warmups (a
// dose-response, lab/report.h, whose trend is the warm-up claim), Pre-LN without and with the
// longest warm-up, and DeepNorm without. With --data DIR (lab/real_data.h) every part runs on that
// real translation task instead of the built-in corpus.
#include "lab/norm.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <tuple>

#include "lab/common.h"
#include "lab/labs.h"
#include "lab/real_data.h"
#include "lab/report.h"
#include "autograd/grad_mode.h"
#include "autograd/ops/cross_entropy.h"
#include "autograd/ops/shape.h"
#include "nn/masks.h"
#include "tensor/check.h"
#include "tensor/kernels/binary.h"
#include "train/run/batch_loss.h"

namespace gf::lab {

LayerGradNorms linear2_grad_norms(nn::Seq2SeqTransformer& model, const train::Batch& batch) {
  model.zero_grad();
  const train::BatchTensors t = train::to_tensors(batch);
  const int64_t pad = model.options().pad;
  const Tensor src_pad = nn::make_pad_mask(t.src, pad);                // (B, S)
  const Tensor tgt_pad = nn::make_pad_mask(t.tgt_in, pad);             // (B, T)
  const Tensor causal = nn::make_causal_mask(t.tgt_in.size(1));         // (T, T)
  const nn::Transformer& tr = *model.transformer;
  std::vector<Variable> enc, dec;  // each layer's output x_l, (B, S, D) and (B, T, D)
  Variable x = model.embed_src(t.src);  // (B, S, D)
  for (const auto& layer : *tr.encoder->layers) {
    x = layer->forward(x, src_pad);  // (B, S, D)
    x.retain_grad();
    enc.push_back(x);
  }
  const Variable memory = tr.encoder->norm ? tr.encoder->norm->forward(x) : x;  // (B, S, D)
  Variable y = model.embed_tgt(t.tgt_in);  // (B, T, D)
  for (const auto& layer : *tr.decoder->layers) {
    y = layer->forward(y, memory, causal, tgt_pad, src_pad).output;  // (B, T, D)
    y.retain_grad();
    dec.push_back(y);
  }
  const Variable logits = model.project(tr.decoder->norm ? tr.decoder->norm->forward(y) : y);  // (B, T, V)
  const Variable loss = cross_entropy(reshape(logits, {-1, logits.size(2)}), t.labels, pad, 0.0);  // ()
  loss.backward();
  LayerGradNorms g;
  g.loss = loss.item();
  for (const auto& layer : *tr.encoder->layers) g.encoder.push_back(l2_norm(layer->linear2->weight.grad()));
  for (const auto& layer : *tr.decoder->layers) g.decoder.push_back(l2_norm(layer->linear2->weight.grad()));
  for (const auto& v : enc) g.encoder_x.push_back(l2_norm(v.data())), g.encoder_dx.push_back(l2_norm(v.grad()));
  for (const auto& v : dec) g.decoder_x.push_back(l2_norm(v.data())), g.decoder_dx.push_back(l2_norm(v.grad()));
  model.zero_grad();
  return g;
}

namespace {

// The three ways the lab builds a layer stack. DeepNorm (Wang et al. 2022) is Post-LN with each
// residual scaled by alpha and the branches' value, output and FFN weights by beta at initialisation.
enum class Arch { PostLN, PreLN, DeepNorm };
const char* arch_name(Arch a) { return a == Arch::PostLN ? "Post-LN" : a == Arch::PreLN ? "Pre-LN" : "DeepNorm"; }
const char* kPostColor = "#d62728";
const char* kPreColor = "#1f77b4";
const char* kDeepColor = "#2ca02c";
const char* color_of(Arch a) { return a == Arch::PostLN ? kPostColor : a == Arch::PreLN ? kPreColor : kDeepColor; }

struct Settings {
  int64_t d_model, heads, ff, layers, batches, max_tokens;
  std::vector<int64_t> depths;
  int64_t steps;
  std::vector<int64_t> warmups;  // the dose-response's levels: front() 0 (no warm-up), back() the longest
  double lr;
  bool control;  // --ablate: Pre-LN in every arm (Post-LN's LayerNorm placement, the causal ingredient, removed)
};

// What an arm runs: under --ablate every arm is Pre-LN.
Arch effective(Arch a, const Settings& s) { return s.control ? Arch::PreLN : a; }

// DeepNorm's constants for an encoder-decoder of N encoder and M decoder layers (Wang et al. 2022,
// Table 1): encoder alpha 0.81 (N^4 M)^(1/16), beta 0.87 (N^4 M)^(-1/16); decoder alpha (3M)^(1/4),
// beta (12M)^(-1/4).
struct DeepNormConstants {
  double enc_alpha, enc_beta, dec_alpha, dec_beta;
};
DeepNormConstants deepnorm_constants(int64_t N, int64_t M) {
  const double nm = std::pow(static_cast<double>(N), 4) * static_cast<double>(M);
  return {0.81 * std::pow(nm, 1.0 / 16), 0.87 * std::pow(nm, -1.0 / 16), std::pow(3.0 * M, 0.25), std::pow(12.0 * M, -0.25)};
}

// Scales the value rows of in_proj_weight and out_proj's weight of one attention by beta.
void scale_value_out(nn::MultiheadAttention& a, double beta) {
  NoGradGuard ng;
  Tensor w = a.in_proj_weight.data();  // (3D, D): rows Q, K, V
  Tensor v = w.narrow(0, 2 * a.embed_dim, a.embed_dim);  // (D, D), a view of the V rows
  kernels::scale_(v, beta);
  Tensor o = a.out_proj->weight.data();  // (D, D)
  kernels::scale_(o, beta);
}
void scale_linear(nn::Linear& l, double beta) {
  NoGradGuard ng;
  Tensor w = l.weight.data();  // (out, in)
  kernels::scale_(w, beta);
}

// A model of `layers` layers per stack: Post-LN, Pre-LN or Post-LN with DeepNorm's residual scale
// and initialisation (the Xavier weights of the value and output projections and of the FFN scaled
// by beta, which is DeepNorm's Xavier gain beta; queries and keys keep gain 1).
std::unique_ptr<nn::Seq2SeqTransformer> make_model(const IdData& data, const Settings& s, int64_t layers, Arch arch, uint64_t seed) {
  auto model = std::make_unique<nn::Seq2SeqTransformer>(small_model(data, s.d_model, s.heads, layers, s.ff, arch == Arch::PreLN), seed);
  if (arch != Arch::DeepNorm) return model;
  const DeepNormConstants c = deepnorm_constants(layers, layers);
  for (const auto& layer : *model->transformer->encoder->layers) {
    layer->residual_scale = c.enc_alpha;
    scale_value_out(*layer->self_attn, c.enc_beta);
    scale_linear(*layer->linear1, c.enc_beta), scale_linear(*layer->linear2, c.enc_beta);
  }
  for (const auto& layer : *model->transformer->decoder->layers) {
    layer->residual_scale = c.dec_alpha;
    scale_value_out(*layer->self_attn, c.dec_beta), scale_value_out(*layer->multihead_attn, c.dec_beta);
    scale_linear(*layer->linear1, c.dec_beta), scale_linear(*layer->linear2, c.dec_beta);
  }
  return model;
}

// Mean over the first `n` batches of fit()'s order for `seed` of every per-layer number.
LayerGradNorms mean_grads(const IdData& data, const Settings& s, int64_t layers, Arch arch, uint64_t seed) {
  auto model = make_model(data, s, layers, effective(arch, s), seed);
  model->train();
  const std::vector<train::Batch> bs = batches(data.train, s.max_tokens, seed);
  const size_t n = std::min(bs.size(), static_cast<size_t>(s.batches));
  LayerGradNorms mean;
  auto add = [n](std::vector<double>& sum, const std::vector<double>& v) {
    sum.resize(v.size(), 0.0);
    for (size_t l = 0; l < v.size(); ++l) sum[l] += v[l] / static_cast<double>(n);
  };
  for (size_t b = 0; b < n; ++b) {
    const LayerGradNorms g = linear2_grad_norms(*model, bs[b]);
    add(mean.encoder, g.encoder), add(mean.decoder, g.decoder);
    add(mean.encoder_x, g.encoder_x), add(mean.decoder_x, g.decoder_x);
    add(mean.encoder_dx, g.encoder_dx), add(mean.decoder_dx, g.decoder_dx);
    mean.loss += g.loss / static_cast<double>(n);
  }
  return mean;
}

// The same without the band, dashed: a second series of the same colour.
ChartSeries line_series(const std::string& name, const std::vector<double>& x, const std::vector<Spread>& s, const std::string& color) {
  ChartSeries c{name, x, {}, {}, {}, true, color};
  for (const auto& v : s) c.y.push_back(v.mean);
  return c;
}

std::string interval_text(const std::vector<double>& v) {
  const Interval iv = t_interval(v);
  return fmt::format("{:.3g} [{:.3g}, {:.3g}]", iv.mean, iv.lo, iv.hi);
}

// ---- part 1: per-layer gradient norms at initialisation ----
constexpr Arch kArchs[] = {Arch::PostLN, Arch::PreLN, Arch::DeepNorm};
struct LayerResult {
  std::vector<Spread> enc[3], dec[3];              // [arch] per layer, over seeds
  std::vector<double> ratio_enc[3], ratio_dec[3];  // [arch] per seed: last layer / first layer
  // [arch] per layer, mean over seeds: |x_l| and |d loss / d x_l| of the residual stream
  std::vector<double> x_enc[3], dx_enc[3], x_dec[3], dx_dec[3];
};

// Prints part 1's tables, draws its panels, keeps its numbers.
void report_layers(Report& r, const Settings& s, const LayerResult& res) {
  r.section(fmt::format("|d loss / d linear2.weight| per layer at initialisation ({} seeds x {} batches; mean [min, max] over seeds)",
                        r.seeds(), s.batches));
  Table t("layers", {"stack", "layer", "Post-LN", "Post-LN min", "Post-LN max", "Pre-LN", "Pre-LN min", "Pre-LN max", "DeepNorm"});
  for (int stack = 0; stack < 2; ++stack)
    for (int64_t l = 0; l < s.layers; ++l) {
      const Spread& po = stack ? res.dec[0][l] : res.enc[0][l];
      const Spread& pr = stack ? res.dec[1][l] : res.enc[1][l];
      const Spread& dn = stack ? res.dec[2][l] : res.enc[2][l];
      t.row({stack ? "decoder" : "encoder", l + 1, po.mean, po.min, po.max, pr.mean, pr.min, pr.max, dn.mean});
    }
  r.print(t);
  Table ratios("last_over_first", {"stack", "Post-LN", "Pre-LN", "DeepNorm"});
  for (int stack = 0; stack < 2; ++stack)
    ratios.row({stack ? "decoder" : "encoder", interval_text(stack ? res.ratio_dec[0] : res.ratio_enc[0]),
                interval_text(stack ? res.ratio_dec[1] : res.ratio_enc[1]), interval_text(stack ? res.ratio_dec[2] : res.ratio_enc[2])});
  r.say("last layer's / first layer's gradient, mean [95% t interval] across seeds (the encoder is reported, the decoder tested):");
  r.print(ratios);
  r.section("the residual stream x_l after each layer, and the gradient reaching it (means over seeds and batches)");
  Table st("stream", {"stack", "layer", "Post-LN |x|", "Post-LN |dL/dx|", "Pre-LN |x|", "Pre-LN |dL/dx|", "Pre-LN |x| |dL/dx|", "DeepNorm |dL/dx|"});
  for (int stack = 0; stack < 2; ++stack)
    for (size_t l = 0; l < static_cast<size_t>(s.layers); ++l) {
      const auto& x = stack ? res.x_dec : res.x_enc;
      const auto& dx = stack ? res.dx_dec : res.dx_enc;
      st.row({stack ? "decoder" : "encoder", static_cast<int64_t>(l + 1), x[0][l], dx[0][l], x[1][l], dx[1][l], x[1][l] * dx[1][l], dx[2][l]});
    }
  r.print(st);
  r.say("|x|: Frobenius norm over the batch; Post-LN's is fixed by its LayerNorm, Pre-LN's grows with every layer it adds to.");

  std::vector<double> x;
  for (int64_t l = 1; l <= s.layers; ++l) x.push_back(static_cast<double>(l));
  const char* stacks[] = {"encoder", "decoder"};
  for (int stack = 0; stack < 2; ++stack)
    r.add_panel(Chart{fmt::format("{}: |grad linear2.weight| at init", stacks[stack]), "layer", "norm (band: seeds min..max)", false, true,
                      {band_series("Post-LN", x, stack ? res.dec[0] : res.enc[0], kPostColor),
                       band_series("Pre-LN", x, stack ? res.dec[1] : res.enc[1], kPreColor),
                       line_series("DeepNorm", x, stack ? res.dec[2] : res.enc[2], kDeepColor)},
                      x, stack ? Chart::Corner::TopRight : Chart::Corner::BottomLeft});
  auto& d = r.data()["layers"];
  for (Arch a : kArchs) {
    const int k = static_cast<int>(a);
    d[arch_name(a)] = {{"encoder_mean", means(res.enc[k])},          {"decoder_mean", means(res.dec[k])},
                       {"encoder_last_over_first", res.ratio_enc[k]}, {"decoder_last_over_first", res.ratio_dec[k]},
                       {"encoder_stream_norm", res.x_enc[k]},        {"encoder_stream_grad_norm", res.dx_enc[k]},
                       {"decoder_stream_norm", res.x_dec[k]},        {"decoder_stream_grad_norm", res.dx_dec[k]}};
  }
}

LayerResult layer_profile(Report& r, const IdData& data, const Settings& s) {
  LayerResult res;
  for (Arch a : kArchs) {
    const int k = static_cast<int>(a);
    std::vector<std::vector<double>> enc, dec, xe, dxe, xd, dxd;
    for (int i = 0; i < r.seeds(); ++i) {
      LayerGradNorms g = mean_grads(data, s, s.layers, a, r.seed(i));
      res.ratio_enc[k].push_back(g.encoder.back() / g.encoder.front());
      res.ratio_dec[k].push_back(g.decoder.back() / g.decoder.front());
      enc.push_back(g.encoder), dec.push_back(g.decoder);
      xe.push_back(g.encoder_x), dxe.push_back(g.encoder_dx), xd.push_back(g.decoder_x), dxd.push_back(g.decoder_dx);
    }
    res.enc[k] = spread_per_column(enc), res.dec[k] = spread_per_column(dec);
    res.x_enc[k] = means(spread_per_column(xe)), res.dx_enc[k] = means(spread_per_column(dxe));
    res.x_dec[k] = means(spread_per_column(xd)), res.dx_dec[k] = means(spread_per_column(dxd));
  }
  report_layers(r, s, res);
  return res;
}

// ---- part 2: the last layer's gradient against depth ----
struct DepthResult {
  std::vector<Spread> enc[2], dec[2];               // [pre_ln] per depth, over seeds
  std::vector<double> seed_slope_enc[2], seed_slope_dec[2];  // [pre_ln] per seed: log-log slope on depth
};

DepthResult depth_sweep(Report& r, const IdData& data, const Settings& s) {
  DepthResult res;
  std::vector<double> x;
  for (int64_t L : s.depths) x.push_back(static_cast<double>(L));
  for (int pre = 0; pre < 2; ++pre) {
    std::vector<std::vector<double>> enc(static_cast<size_t>(r.seeds())), dec(static_cast<size_t>(r.seeds()));
    for (int64_t L : s.depths)
      for (int i = 0; i < r.seeds(); ++i) {
        LayerGradNorms g = mean_grads(data, s, L, pre ? Arch::PreLN : Arch::PostLN, r.seed(i));
        enc[i].push_back(g.encoder.back()), dec[i].push_back(g.decoder.back());
      }
    res.enc[pre] = spread_per_column(enc), res.dec[pre] = spread_per_column(dec);
    for (int i = 0; i < r.seeds(); ++i) res.seed_slope_enc[pre].push_back(loglog_slope(x, enc[i])), res.seed_slope_dec[pre].push_back(loglog_slope(x, dec[i]));
  }
  r.section("the last layer's |d loss / d linear2.weight| against depth L (layers in each stack; mean [min, max] over seeds)");
  Table t("depth", {"L", "Post-LN enc", "Post-LN dec", "Post-LN dec min", "Post-LN dec max", "Pre-LN enc", "Pre-LN dec", "Pre-LN dec min",
                    "Pre-LN dec max"});
  for (size_t k = 0; k < x.size(); ++k)
    t.row({s.depths[k], res.enc[0][k].mean, res.dec[0][k].mean, res.dec[0][k].min, res.dec[0][k].max, res.enc[1][k].mean,
           res.dec[1][k].mean, res.dec[1][k].min, res.dec[1][k].max});
  r.print(t);
  r.say(fmt::format("log-log slope on L, mean [95% t interval] across seeds: Post-LN encoder {}, decoder {}; Pre-LN encoder {}, decoder {} "
                    "(Theorem 1: Post-LN 0, Pre-LN -0.5)",
                    interval_text(res.seed_slope_enc[0]), interval_text(res.seed_slope_dec[0]), interval_text(res.seed_slope_enc[1]),
                    interval_text(res.seed_slope_dec[1])));

  ChartSeries ref{"1/sqrt(L) (Theorem 1, Pre-LN)", x, {}, {}, {}, true, "#7f7f7f"};
  for (double L : x) ref.y.push_back(res.dec[1].front().mean * std::sqrt(x.front() / L));
  r.add_panel(Chart{"last layer's |grad linear2.weight| against depth", "layers L", "norm (band: seeds min..max)", true, true,
                    {band_series("Post-LN decoder", x, res.dec[0], kPostColor), band_series("Pre-LN decoder", x, res.dec[1], kPreColor),
                     line_series("Post-LN encoder", x, res.enc[0], kPostColor), line_series("Pre-LN encoder", x, res.enc[1], kPreColor), ref},
                    x, Chart::Corner::BottomLeft});
  auto& d = r.data()["depth"];
  d["depths"] = s.depths;
  for (int pre = 0; pre < 2; ++pre)
    d[pre ? "Pre-LN" : "Post-LN"] = {{"encoder_last_mean", means(res.enc[pre])}, {"decoder_last_mean", means(res.dec[pre])},
                                     {"slope_encoder_per_seed", res.seed_slope_enc[pre]}, {"slope_decoder_per_seed", res.seed_slope_dec[pre]}};
  return res;
}

// ---- part 3: training at a high learning rate, at several warm-up lengths, and DeepNorm ----
struct TrainArm {
  Arch arch;
  int64_t warmup;  // linear warm-up steps, 0: none
  std::string name;
};
// The arms: Post-LN at every level of --warmups (the dose-response), Pre-LN without and with the
// longest warm-up (Xiong et al.'s contrast), and the intervention, DeepNorm without warm-up.
std::vector<TrainArm> train_arms(const Settings& s) {
  auto name = [](Arch a, int64_t w) { return w ? fmt::format("{}, warm-up {}", arch_name(a), w) : fmt::format("{}, no warm-up", arch_name(a)); };
  std::vector<TrainArm> arms;
  for (int64_t w : s.warmups) arms.push_back({Arch::PostLN, w, name(Arch::PostLN, w)});
  for (int64_t w : {int64_t{0}, s.warmups.back()}) arms.push_back({Arch::PreLN, w, name(Arch::PreLN, w)});
  arms.push_back({Arch::DeepNorm, 0, name(Arch::DeepNorm, 0)});
  return arms;
}
// Post-LN's colour at warm-up level k of n: light (short) to dark (long).
std::string warmup_color(size_t k, size_t n) {
  static const char* const ramp[] = {"#ff9896", "#f0027f", "#d62728", "#8c1c13"};
  return ramp[n <= 1 ? 3 : std::min<size_t>(3, k * 3 / (n - 1))];
}

struct TrainResult {
  std::vector<TrainArm> arms;
  std::vector<std::vector<double>> nll;  // [arm] per seed: held-out NLL after training (a diverged run: its first loss)
  std::vector<int> diverged;             // [arm]
  // The arm's per-seed NLL (a bug of the lab when there is no such arm).
  const std::vector<double>& of(Arch a, int64_t warmup) const {
    for (size_t k = 0; k < arms.size(); ++k)
      if (arms[k].arch == a && arms[k].warmup == warmup) return nll[k];
    throw std::logic_error(fmt::format("lab norm: no training arm {} with warm-up {}", arch_name(a), warmup));
  }
};

// One training run: its losses (NaN after a divergence, so that every run has s.steps of them) and
// its test NLL. A diverged run has no model to test: it counts as its first loss, what a model that
// learnt nothing scores (log of the vocabulary, about), so that it ranks below every run that learnt.
struct OneRun {
  std::vector<double> losses;
  double nll = 0;
  bool diverged = false;
};
OneRun train_once(const IdData& data, const Settings& s, Arch arch, int64_t warmup, uint64_t seed) {
  auto model = make_model(data, s, s.layers, arch, seed);
  FitOptions o;
  o.steps = s.steps, o.lr = s.lr, o.warmup = warmup, o.clip = 0, o.max_tokens = s.max_tokens, o.seed = seed;
  FitResult f = fit(*model, data.train, o);
  model->eval();
  OneRun run{f.losses, 0, f.diverged};
  run.losses.resize(static_cast<size_t>(s.steps), NAN);
  run.nll = f.diverged ? f.losses.front() : teacher_forced(*model, data.test).nll;
  return run;
}

// The mean curve over seeds as a moving average of `window` steps, so that it reads through
// batch-to-batch noise.
ChartSeries smoothed(const std::string& name, const std::vector<std::vector<double>>& curves, int window, bool dashed, const char* color) {
  const std::vector<double> mean = means(spread_per_column(curves));
  ChartSeries c{name, {}, {}, {}, {}, dashed, color};
  for (size_t k = static_cast<size_t>(window - 1); k < mean.size(); ++k) {
    double m = 0;
    for (int j = 0; j < window; ++j) m += mean[k - static_cast<size_t>(j)] / window;
    c.x.push_back(static_cast<double>(k + 1)), c.y.push_back(m);
  }
  return c;
}

TrainResult warmup_runs(Report& r, const IdData& data, const Settings& s) {
  TrainResult res;
  res.arms = train_arms(s);
  std::vector<ChartSeries> curves;
  const int window = static_cast<int>(std::max<int64_t>(1, s.steps / 20));
  // Arms that are the same model under --ablate (every one Pre-LN) run once.
  std::map<std::tuple<Arch, int64_t, uint64_t>, OneRun> done;
  size_t post_level = 0;
  for (const TrainArm& arm : res.arms) {
    std::vector<std::vector<double>> losses;
    res.nll.emplace_back(), res.diverged.push_back(0);
    for (int i = 0; i < r.seeds(); ++i) {
      const auto key = std::make_tuple(effective(arm.arch, s), arm.warmup, r.seed(i));
      if (!done.count(key)) done[key] = train_once(data, s, std::get<0>(key), arm.warmup, r.seed(i));
      const OneRun& run = done.at(key);
      losses.push_back(run.losses);
      res.nll.back().push_back(run.nll);
      res.diverged.back() += run.diverged;
    }
    const std::string color = arm.arch == Arch::PostLN ? warmup_color(post_level++, s.warmups.size()) : color_of(arm.arch);
    curves.push_back(smoothed(arm.name, losses, window, arm.warmup == 0, color.c_str()));
  }
  r.section(fmt::format("training {} steps at lr {}, Adam, no clipping: Post-LN with {} warm-up steps, Pre-LN with 0 and {}, DeepNorm with 0 "
                        "({} seeds)", s.steps, s.lr, fmt::join(s.warmups, ", "), s.warmups.back(), r.seeds()));
  Table t("warmup", {"model", "warm-up", "test NLL", "95% interval", "min", "max", "diverged"});
  for (size_t k = 0; k < res.arms.size(); ++k) {
    const Interval iv = t_interval(res.nll[k]);
    const Spread sp = spread(res.nll[k]);
    t.row({arch_name(res.arms[k].arch), res.arms[k].warmup, iv.mean, fmt::format("[{:.3f}, {:.3f}]", iv.lo, iv.hi), sp.min, sp.max,
           res.diverged[k]});
  }
  r.print(t);
  const DeepNormConstants c = deepnorm_constants(s.layers, s.layers);
  r.say(fmt::format("DeepNorm (Post-LN, x * alpha + f(x) before each LayerNorm; value, output and FFN weights x beta at init): encoder alpha "
                    "{:.3f}, beta {:.3f}; decoder alpha {:.3f}, beta {:.3f}",
                    c.enc_alpha, c.enc_beta, c.dec_alpha, c.dec_beta));
  r.add_panel(Chart{fmt::format("training loss at lr {}", s.lr), "step", fmt::format("loss ({}-step average, mean of seeds)", window), false,
                    false, curves, {}, Chart::Corner::TopRight});
  // The intervention's own panel: its statistic, seed by seed.
  std::vector<double> seeds;
  for (int i = 0; i < r.seeds(); ++i) seeds.push_back(static_cast<double>(r.seed(i)));
  r.add_panel(Chart{"intervention: DeepNorm without warm-up", "seed", "held-out NLL after training", false, false,
                    {{"Post-LN, no warm-up", seeds, res.of(Arch::PostLN, 0), {}, {}, true, kPostColor},
                     {fmt::format("Post-LN, warm-up {}", s.warmups.back()), seeds, res.of(Arch::PostLN, s.warmups.back()), {}, {}, false, kPostColor},
                     {"DeepNorm, no warm-up", seeds, res.of(Arch::DeepNorm, 0), {}, {}, false, kDeepColor}},
                    seeds, Chart::Corner::TopRight});
  auto& d = r.data()["warmup"];
  for (size_t k = 0; k < res.arms.size(); ++k) d[res.arms[k].name] = {{"test_nll", res.nll[k]}, {"diverged", res.diverged[k]}};
  d["warmups"] = s.warmups;
  return res;
}

// The dose-response: per seed, Post-LN's held-out NLL at each warm-up length, and its slope on the
// length (the levels add steps from 0, so the slope is on the length itself, in nats per step).
std::vector<double> warmup_trend(Report& r, const Settings& s, const TrainResult& tr) {
  std::vector<double> levels;
  for (int64_t w : s.warmups) levels.push_back(static_cast<double>(w));
  std::vector<std::vector<double>> nll(static_cast<size_t>(r.seeds()));  // [seed][level]
  for (int64_t w : s.warmups)
    for (int i = 0; i < r.seeds(); ++i) nll[static_cast<size_t>(i)].push_back(tr.of(Arch::PostLN, w)[static_cast<size_t>(i)]);
  return r.dose_response({"warm-up", "warm-up steps", "held-out NLL, Post-LN", levels, nll, TrendKind::Slope, false, kPostColor});
}

// The claims, each from the numbers above (lab/claims.cpp's rows for norm).
void check_claims(Report& r, const Settings& s, const LayerResult& lr, const DepthResult& dr, const TrainResult& tr) {
  r.paper("postln_grows", lr.ratio_dec[0],
          fmt::format("decoder last/first per seed {:.3f}; the encoder's, reported not tested: {}", fmt::join(lr.ratio_dec[0], ", "),
                      interval_text(lr.ratio_enc[0])));
  std::vector<double> pre_worse;  // per seed: the larger of the two stacks' ratios
  for (size_t i = 0; i < lr.ratio_dec[1].size(); ++i) pre_worse.push_back(std::max(lr.ratio_dec[1][i], lr.ratio_enc[1][i]));
  r.paper("preln_not_growing", pre_worse,
          fmt::format("last/first: decoder {}, encoder {}", interval_text(lr.ratio_dec[1]), interval_text(lr.ratio_enc[1])));
  r.paper("preln_falls_with_depth", dr.seed_slope_dec[1], fmt::format("encoder's slope: {}", interval_text(dr.seed_slope_enc[1])));
  r.paper("postln_flat_with_depth", dr.seed_slope_dec[0], fmt::format("encoder's slope: {}", interval_text(dr.seed_slope_enc[0])));
  // Per seed, paired: the same initialisation and batches at every warm-up length.
  const int64_t longest = s.warmups.back();
  const auto trend = warmup_trend(r, s, tr);
  r.paper("postln_warmup_trend", trend,
          fmt::format("slope of Post-LN's test NLL on the warm-up length ({} steps), nats per step, per seed: {:.5f}", fmt::join(s.warmups, ", "),
                      fmt::join(trend, ", ")));
  const auto& post0 = tr.of(Arch::PostLN, 0);
  const auto& post_w = tr.of(Arch::PostLN, longest);
  const auto& pre0 = tr.of(Arch::PreLN, 0);
  const auto& pre_w = tr.of(Arch::PreLN, longest);
  const auto& deep = tr.of(Arch::DeepNorm, 0);
  std::vector<double> post_gap, pre_gap, less, deep_gain, deep_vs_warm;
  for (size_t i = 0; i < post0.size(); ++i) {
    post_gap.push_back(post0[i] - post_w[i]);
    pre_gap.push_back(pre0[i] - pre_w[i]);
    less.push_back(post_gap.back() - pre_gap.back());
    deep_gain.push_back(post0[i] - deep[i]);
    deep_vs_warm.push_back(deep[i] - post_w[i]);
  }
  r.paper("preln_needs_less", less,
          fmt::format("test NLL without - with {} warm-up steps: Post-LN per seed {:.3f}; Pre-LN per seed {:.3f}", longest, fmt::join(post_gap, ", "),
                      fmt::join(pre_gap, ", ")));
  r.paper("deepnorm_trains", deep_gain,
          fmt::format("test NLL Post-LN - DeepNorm, both without warm-up, per seed: {:.3f}; DeepNorm without warm-up - Post-LN with {}: {}",
                      fmt::join(deep_gain, ", "), longest, interval_text(deep_vs_warm)));
}

// --control: the placebo. A pool of Post-LN models trained without warm-up, each on its own seed:
// the arm both training contrasts start from, so that each is read between two groups of the same
// arm; and the trend with runs without warm-up on different seeds in every level's place (true
// trend 0). The gradient claims hold one arm against a threshold; preln_needs_less is the difference
// of two contrasts.
void placebo(Report& r, const IdData& data, const Settings& s) {
  const int levels = static_cast<int>(s.warmups.size()), n = r.trend_placebo_pool(levels);
  r.say(fmt::format("PLACEBO: {} Post-LN models trained {} steps at lr {} without warm-up, on seeds {}-{}; each training contrast "
                    "compares two groups of them, unpaired, and the trend reads {} of them per seed as warm-ups {}.", n, s.steps, s.lr,
                    r.seed(0), r.seed(n - 1), levels, fmt::join(s.warmups, ", ")));
  std::vector<double> nll;
  Table t("the pool: Post-LN, no warm-up", {"seed", "held-out NLL", "diverged"});
  for (int i = 0; i < n; ++i) {
    const OneRun run = train_once(data, s, Arch::PostLN, 0, r.seed(i));
    nll.push_back(run.nll);
    t.row({static_cast<int64_t>(r.seed(i)), run.nll, run.diverged ? "yes" : "no"});
  }
  r.print(t);
  const std::string one_arm = "one arm's gradients against a threshold, no contrast between arms";
  for (const char* id : {"postln_grows", "preln_not_growing", "preln_falls_with_depth", "postln_flat_with_depth"}) r.no_placebo(id, one_arm);
  std::vector<double> levels_x;
  for (int64_t w : s.warmups) levels_x.push_back(static_cast<double>(w));
  r.placebo_trend("postln_warmup_trend", levels, [&](const std::vector<int>& runs) {
    std::vector<double> y;
    for (int j : runs) y.push_back(nll[static_cast<size_t>(j)]);
    return trend(levels_x, y, TrendKind::Slope);
  }, "Post-LN runs without warm-up on different seeds as the warm-up levels");
  r.no_placebo("preln_needs_less", "the difference of two arms' warm-up gaps; postln_warmup_trend's placebo is Post-LN's response's");
  r.placebo("deepnorm_trains", [&](int a, int b) { return nll[a] - nll[b]; }, "run a in Post-LN's place, b in DeepNorm's");
}

// The warm-up levels of the dose-response (lab/report.h): 4 or more whole numbers of steps,
// increasing, from 0 (the no-warm-up arm) to at most --steps.
std::vector<int64_t> warmup_levels(const Report& r) {
  const std::vector<double> levels = parse_increasing_reals(r.text("warmups"), "lab norm: --warmups");
  GF_CHECK(levels.size() >= 4, "lab norm: --warmups needs 4 or more warm-up lengths for the dose-response, got '{}'", r.text("warmups"));
  GF_CHECK(levels.front() == 0 && levels.back() <= static_cast<double>(r.integer("steps")),
           "lab norm: --warmups must start at 0 (no warm-up) and end at most at --steps {}, got '{}'", r.integer("steps"), r.text("warmups"));
  std::vector<int64_t> out;
  for (double w : levels) {
    GF_CHECK(w == std::floor(w), "lab norm: --warmups are whole numbers of steps, got '{}'", r.text("warmups"));
    out.push_back(static_cast<int64_t>(w));
  }
  return out;
}

void run(Report& r) {
  Settings s{r.integer("d-model"), r.integer("heads"), r.integer("ff"), r.integer("layers"), r.integer("batches"), r.integer("max-tokens"),
             parse_increasing_ints(r.text("depths"), "lab norm: --depths"), r.integer("steps"), warmup_levels(r), r.real("lr"),
             r.ablation_mode()};
  GF_CHECK(s.layers >= 2, "lab norm: --layers must be at least 2, got {}", s.layers);
  std::optional<RealData> real;
  if (uses_real_data(r)) real = real_data(r);
  const IdData data = real ? real->ids : builtin_corpus(r.integer("pairs"), 1);
  if (r.placebo_mode()) return placebo(r, data, s);
  r.say(fmt::format("{}: {} training pairs, vocabularies {} / {}; d_model {}, {} heads, FFN {}, no dropout",
                    real ? "the real task above" : "built-in English -> Korean corpus", data.train.size(), data.src_vocab, data.tgt_vocab,
                    s.d_model, s.heads, s.ff));
  r.say("gradients: teacher-forced cross-entropy (mean per target token, PAD ignored) of one batch at initialisation,");
  r.say(fmt::format("averaged over the first {} batches ({} tokens at most) of each seed's order; the seed also draws the weights.",
                    s.batches, s.max_tokens));
  if (s.control) r.say("ABLATION: every arm is Pre-LN (the columns keep their names); the arms then differ only where the protocol does.");

  const LayerResult lr = layer_profile(r, data, s);
  const DepthResult dr = depth_sweep(r, data, s);
  const TrainResult tr = warmup_runs(r, data, s);
  check_claims(r, s, lr, dr, tr);
}

}  // namespace

Lab norm_lab() {
  Lab l;
  l.name = "norm";
  l.title = "Post-LN vs Pre-LN gradients at initialisation, and warm-up";
  l.reference = "Xiong et al. 2020, arXiv:2002.04745 (Theorem 1, Figure 3)";
  l.question = "Where does the gradient concentrate at initialisation with the LayerNorm after (Post-LN) or before (Pre-LN) each "
               "residual branch, how does it scale with depth, and which one needs a learning-rate warm-up?";
  l.control = "placebo: Post-LN trained without warm-up on different seeds, in the arms' and the warm-up levels' places";
  l.placebo = true;
  l.ablation = "Pre-LN in every arm (Post-LN's and DeepNorm's included)";
  l.default_seeds = 5;
  l.options = {{"pairs", Option::Int, "2000", "built-in corpus pairs (train split 90%)"},
               {"d-model", Option::Int, "64", "model width"},
               {"heads", Option::Int, "4", "attention heads"},
               {"ff", Option::Int, "256", "FFN width"},
               {"layers", Option::Int, "6", "layers in each stack for the per-layer profile and the training runs"},
               {"batches", Option::Int, "4", "batches per seed averaged at initialisation"},
               {"max-tokens", Option::Int, "512", "tokens per batch"},
               {"depths", Option::Text, "2,4,8,16", "depths (layers per stack) of the sweep"},
               {"steps", Option::Int, "90", "training steps of each warm-up run"},
               {"lr", Option::Real, "0.002", "learning rate of the warm-up runs"},
               {"warmups", Option::Text, "0,20,40,60",
                "warm-up lengths in steps (linear, then constant): Post-LN's dose-response levels (4 or more, increasing, from 0); Pre-LN "
                "runs at 0 and the last"}};
  add_real_data_options(l.options);  // --data: a real translation task in place of the built-in corpus (lab/real_data.h)
  l.run = run;
  return l;
}

}  // namespace gf::lab
