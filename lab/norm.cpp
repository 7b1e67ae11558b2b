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
// a short training run at a high learning rate with and without warm-up.
#include "lab/norm.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "lab/common.h"
#include "lab/labs.h"
#include "lab/report.h"
#include "autograd/ops/cross_entropy.h"
#include "autograd/ops/shape.h"
#include "nn/masks.h"
#include "tensor/check.h"
#include "train/loop/batch_loss.h"

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

const char* ln_name(bool pre_ln) { return pre_ln ? "Pre-LN" : "Post-LN"; }

struct Settings {
  int64_t d_model, heads, ff, layers, batches, max_tokens;
  std::vector<int64_t> depths;
  int64_t steps, warmup;
  double lr;
};

// Mean over the first `n` batches of fit()'s order for `seed` of every per-layer number.
LayerGradNorms mean_grads(const IdData& data, const Settings& s, int64_t layers, bool pre_ln, uint64_t seed) {
  nn::Seq2SeqTransformer model(small_model(data, s.d_model, s.heads, layers, s.ff, pre_ln), seed);
  model.train();
  const std::vector<train::Batch> bs = batches(data.train, s.max_tokens, seed);
  const size_t n = std::min(bs.size(), static_cast<size_t>(s.batches));
  LayerGradNorms mean;
  auto add = [n](std::vector<double>& sum, const std::vector<double>& v) {
    sum.resize(v.size(), 0.0);
    for (size_t l = 0; l < v.size(); ++l) sum[l] += v[l] / static_cast<double>(n);
  };
  for (size_t b = 0; b < n; ++b) {
    const LayerGradNorms g = linear2_grad_norms(model, bs[b]);
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

const char* kPostColor = "#d62728";
const char* kPreColor = "#1f77b4";

// ---- part 1: per-layer gradient norms at initialisation ----
struct LayerResult {
  std::vector<Spread> enc[2], dec[2];       // [pre_ln] per layer, over seeds
  std::vector<double> ratio_enc[2], ratio_dec[2];  // [pre_ln] per seed: last layer / first layer
  // [pre_ln] per layer, mean over seeds: |x_l| and |d loss / d x_l| of the residual stream
  std::vector<double> x_enc[2], dx_enc[2], x_dec[2], dx_dec[2];
};

// Prints part 1's tables, draws its panels, keeps its numbers.
void report_layers(Report& r, const Settings& s, const LayerResult& res) {
  r.section(fmt::format("|d loss / d linear2.weight| per layer at initialisation ({} seeds x {} batches; mean [min, max] over seeds)",
                        r.seeds(), s.batches));
  Table t("layers", {"stack", "layer", "Post-LN", "Post-LN min", "Post-LN max", "Pre-LN", "Pre-LN min", "Pre-LN max"});
  for (int stack = 0; stack < 2; ++stack)
    for (int64_t l = 0; l < s.layers; ++l) {
      const Spread& po = stack ? res.dec[0][l] : res.enc[0][l];
      const Spread& pr = stack ? res.dec[1][l] : res.enc[1][l];
      t.row({stack ? "decoder" : "encoder", l + 1, po.mean, po.min, po.max, pr.mean, pr.min, pr.max});
    }
  r.print(t);
  r.section("the residual stream x_l after each layer, and the gradient reaching it (means over seeds and batches)");
  Table st("stream", {"stack", "layer", "Post-LN |x|", "Post-LN |dL/dx|", "Pre-LN |x|", "Pre-LN |dL/dx|", "Pre-LN |x| |dL/dx|"});
  for (int stack = 0; stack < 2; ++stack)
    for (size_t l = 0; l < static_cast<size_t>(s.layers); ++l) {
      const auto& x = stack ? res.x_dec : res.x_enc;
      const auto& dx = stack ? res.dx_dec : res.dx_enc;
      st.row({stack ? "decoder" : "encoder", static_cast<int64_t>(l + 1), x[0][l], dx[0][l], x[1][l], dx[1][l], x[1][l] * dx[1][l]});
    }
  r.print(st);
  r.say("|x|: Frobenius norm over the batch; Post-LN's is fixed by its LayerNorm, Pre-LN's grows with every layer it adds to.");

  std::vector<double> x;
  for (int64_t l = 1; l <= s.layers; ++l) x.push_back(static_cast<double>(l));
  const char* stacks[] = {"encoder", "decoder"};
  for (int stack = 0; stack < 2; ++stack)
    r.add_panel(Chart{fmt::format("{}: |grad linear2.weight| at init", stacks[stack]), "layer", "norm (band: seeds min..max)", false, true,
                      {band_series("Post-LN", x, stack ? res.dec[0] : res.enc[0], kPostColor),
                       band_series("Pre-LN", x, stack ? res.dec[1] : res.enc[1], kPreColor)},
                      x, stack ? Chart::Corner::TopRight : Chart::Corner::BottomLeft});
  auto& d = r.data()["layers"];
  for (int pre = 0; pre < 2; ++pre) {
    d[ln_name(pre)] = {{"encoder_mean", means(res.enc[pre])},          {"decoder_mean", means(res.dec[pre])},
                       {"encoder_last_over_first", res.ratio_enc[pre]}, {"decoder_last_over_first", res.ratio_dec[pre]},
                       {"encoder_stream_norm", res.x_enc[pre]},        {"encoder_stream_grad_norm", res.dx_enc[pre]},
                       {"decoder_stream_norm", res.x_dec[pre]},        {"decoder_stream_grad_norm", res.dx_dec[pre]}};
  }
}

LayerResult layer_profile(Report& r, const IdData& data, const Settings& s) {
  LayerResult res;
  for (int pre = 0; pre < 2; ++pre) {
    std::vector<std::vector<double>> enc, dec, xe, dxe, xd, dxd;
    for (int i = 0; i < r.seeds(); ++i) {
      LayerGradNorms g = mean_grads(data, s, s.layers, pre, r.seed(i));
      res.ratio_enc[pre].push_back(g.encoder.back() / g.encoder.front());
      res.ratio_dec[pre].push_back(g.decoder.back() / g.decoder.front());
      enc.push_back(g.encoder), dec.push_back(g.decoder);
      xe.push_back(g.encoder_x), dxe.push_back(g.encoder_dx), xd.push_back(g.decoder_x), dxd.push_back(g.decoder_dx);
    }
    res.enc[pre] = spread_per_column(enc), res.dec[pre] = spread_per_column(dec);
    res.x_enc[pre] = means(spread_per_column(xe)), res.dx_enc[pre] = means(spread_per_column(dxe));
    res.x_dec[pre] = means(spread_per_column(xd)), res.dx_dec[pre] = means(spread_per_column(dxd));
  }
  report_layers(r, s, res);
  return res;
}


// ---- part 2: the last layer's gradient against depth ----
struct DepthResult {
  std::vector<Spread> enc[2], dec[2];  // [pre_ln] per depth, over seeds
  double slope_enc[2], slope_dec[2];   // log-log slope of the means on depth
};

DepthResult depth_sweep(Report& r, const IdData& data, const Settings& s) {
  DepthResult res;
  std::vector<double> x;
  for (int64_t L : s.depths) x.push_back(static_cast<double>(L));
  for (int pre = 0; pre < 2; ++pre) {
    std::vector<std::vector<double>> enc(static_cast<size_t>(r.seeds())), dec(static_cast<size_t>(r.seeds()));
    for (int64_t L : s.depths)
      for (int i = 0; i < r.seeds(); ++i) {
        LayerGradNorms g = mean_grads(data, s, L, pre, r.seed(i));
        enc[i].push_back(g.encoder.back()), dec[i].push_back(g.decoder.back());
      }
    res.enc[pre] = spread_per_column(enc), res.dec[pre] = spread_per_column(dec);
    std::vector<double> me, md;
    for (size_t k = 0; k < x.size(); ++k) me.push_back(res.enc[pre][k].mean), md.push_back(res.dec[pre][k].mean);
    res.slope_enc[pre] = loglog_slope(x, me), res.slope_dec[pre] = loglog_slope(x, md);
  }
  r.section("the last layer's |d loss / d linear2.weight| against depth L (layers in each stack; mean [min, max] over seeds)");
  Table t("depth", {"L", "Post-LN enc", "Post-LN dec", "Post-LN dec min", "Post-LN dec max", "Pre-LN enc", "Pre-LN dec", "Pre-LN dec min",
                    "Pre-LN dec max"});
  for (size_t k = 0; k < x.size(); ++k)
    t.row({s.depths[k], res.enc[0][k].mean, res.dec[0][k].mean, res.dec[0][k].min, res.dec[0][k].max, res.enc[1][k].mean,
           res.dec[1][k].mean, res.dec[1][k].min, res.dec[1][k].max});
  r.print(t);
  r.say(fmt::format("log-log slope on L: Post-LN encoder {:.3f}, decoder {:.3f}; Pre-LN encoder {:.3f}, decoder {:.3f} (Theorem 1: Pre-LN -0.5)",
                    res.slope_enc[0], res.slope_dec[0], res.slope_enc[1], res.slope_dec[1]));

  ChartSeries ref{"1/sqrt(L) (Theorem 1, Pre-LN)", x, {}, {}, {}, true, "#7f7f7f"};
  for (double L : x) ref.y.push_back(res.dec[1].front().mean * std::sqrt(x.front() / L));
  r.add_panel(Chart{"last layer's |grad linear2.weight| against depth", "layers L", "norm (band: seeds min..max)", true, true,
                    {band_series("Post-LN decoder", x, res.dec[0], kPostColor), band_series("Pre-LN decoder", x, res.dec[1], kPreColor),
                     line_series("Post-LN encoder", x, res.enc[0], kPostColor), line_series("Pre-LN encoder", x, res.enc[1], kPreColor), ref},
                    x, Chart::Corner::BottomLeft});
  auto& d = r.data()["depth"];
  d["depths"] = s.depths;
  for (int pre = 0; pre < 2; ++pre) {
    std::vector<double> me, md;
    for (size_t k = 0; k < x.size(); ++k) me.push_back(res.enc[pre][k].mean), md.push_back(res.dec[pre][k].mean);
    d[ln_name(pre)] = {{"encoder_last_mean", me}, {"decoder_last_mean", md}, {"slope_encoder", res.slope_enc[pre]},
                       {"slope_decoder", res.slope_dec[pre]}};
  }
  return res;
}

// ---- part 3: training at a high learning rate, with and without warm-up ----
struct TrainResult {
  std::vector<double> nll[2][2];  // [pre_ln][warm] per seed: held-out NLL after training
  int diverged[2][2] = {{0, 0}, {0, 0}};
};

// One training run: its losses (NaN after a divergence, so that every run has s.steps of them) and
// its test NLL (NaN when it diverged).
std::pair<std::vector<double>, double> train_once(const IdData& data, const Settings& s, bool pre_ln, bool warm, uint64_t seed, int* diverged) {
  nn::Seq2SeqTransformer model(small_model(data, s.d_model, s.heads, s.layers, s.ff, pre_ln), seed);
  FitOptions o;
  o.steps = s.steps, o.lr = s.lr, o.warmup = warm ? s.warmup : 0, o.clip = 0, o.max_tokens = s.max_tokens, o.seed = seed;
  FitResult f = fit(model, data.train, o);
  *diverged += f.diverged;
  model.eval();
  f.losses.resize(static_cast<size_t>(s.steps), NAN);
  return {f.losses, f.diverged ? NAN : teacher_forced(model, data.test).nll};
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
  std::vector<ChartSeries> curves;
  const int window = static_cast<int>(std::max<int64_t>(1, s.steps / 20));
  for (int pre = 0; pre < 2; ++pre)
    for (int warm = 0; warm < 2; ++warm) {
      std::vector<std::vector<double>> losses;
      for (int i = 0; i < r.seeds(); ++i) {
        auto [l, nll] = train_once(data, s, pre, warm, r.seed(i), &res.diverged[pre][warm]);
        losses.push_back(std::move(l));
        res.nll[pre][warm].push_back(nll);
      }
      const std::string name = fmt::format("{} {}", ln_name(pre), warm ? fmt::format("warm-up {}", s.warmup) : "no warm-up");
      curves.push_back(smoothed(name, losses, window, !warm, pre ? kPreColor : kPostColor));
    }
  r.section(fmt::format("training {} steps at lr {}, Adam, no clipping, with and without {} warm-up steps ({} seeds)", s.steps, s.lr,
                        s.warmup, r.seeds()));
  Table t("warmup", {"model", "warm-up", "test NLL", "min", "max", "diverged"});
  for (int pre = 0; pre < 2; ++pre)
    for (int warm = 0; warm < 2; ++warm) {
      Spread sp = spread(res.nll[pre][warm]);
      t.row({ln_name(pre), warm ? s.warmup : int64_t{0}, sp.mean, sp.min, sp.max, res.diverged[pre][warm]});
    }
  r.print(t);
  r.add_panel(Chart{fmt::format("training loss at lr {}", s.lr), "step", fmt::format("loss ({}-step average, mean of seeds)", window), false,
                    false, curves, {}, Chart::Corner::TopRight});
  auto& d = r.data()["warmup"];
  for (int pre = 0; pre < 2; ++pre) d[ln_name(pre)] = {{"test_nll_no_warmup", res.nll[pre][0]}, {"test_nll_warmup", res.nll[pre][1]}};
  return res;
}

// The claims, each from the numbers above.
void check_claims(Report& r, const LayerResult& lr, const DepthResult& dr, const TrainResult& tr) {
  const Spread post_dec = spread(lr.ratio_dec[0]), post_enc = spread(lr.ratio_enc[0]);
  const Spread pre_dec = spread(lr.ratio_dec[1]), pre_enc = spread(lr.ratio_enc[1]);
  r.claim("Post-LN: the gradient grows toward the output: in the decoder (the stack the loss reads) the last layer's is at least 1.5x the first's, for every seed",
          post_dec.min >= 1.5,
          fmt::format("last/first: decoder {:.2f} [{:.2f}, {:.2f}] (encoder, not tested: {:.2f} [{:.2f}, {:.2f}])", post_dec.mean, post_dec.min,
                      post_dec.max, post_enc.mean, post_enc.min, post_enc.max));
  r.claim("Pre-LN: the gradient does not grow toward the output: the last layer's is at most 1.2x the first's, in both stacks, for every seed",
          pre_dec.max <= 1.2 && pre_enc.max <= 1.2,
          fmt::format("last/first: decoder {:.2f} [{:.2f}, {:.2f}], encoder {:.2f} [{:.2f}, {:.2f}]", pre_dec.mean, pre_dec.min, pre_dec.max,
                      pre_enc.mean, pre_enc.min, pre_enc.max));
  r.claim("Pre-LN: the last layer's gradient falls with depth about as 1/sqrt(L) (decoder's log-log slope in [-0.8, -0.25])",
          dr.slope_dec[1] >= -0.8 && dr.slope_dec[1] <= -0.25,
          fmt::format("decoder slope {:.3f} (encoder {:.3f})", dr.slope_dec[1], dr.slope_enc[1]));
  r.claim("Post-LN: the last layer's gradient does not fall with depth (decoder's log-log slope above -0.15)", dr.slope_dec[0] > -0.15,
          fmt::format("decoder slope {:.3f} (encoder {:.3f})", dr.slope_dec[0], dr.slope_enc[0]));
  // A diverged run counts as +infinity: worse than any finished one.
  auto finite_or_inf = [](double x) { return std::isfinite(x) ? x : INFINITY; };
  double post_nowarm_best = INFINITY, post_warm_worst = -INFINITY;
  for (double x : tr.nll[0][0]) post_nowarm_best = std::min(post_nowarm_best, finite_or_inf(x));
  for (double x : tr.nll[0][1]) post_warm_worst = std::max(post_warm_worst, finite_or_inf(x));
  auto mean_inf = [&](const std::vector<double>& v) {
    double m = 0;
    for (double x : v) m += finite_or_inf(x) / static_cast<double>(v.size());
    return m;
  };
  const double post_gap = mean_inf(tr.nll[0][0]) - mean_inf(tr.nll[0][1]);
  const double pre_gap = mean_inf(tr.nll[1][0]) - mean_inf(tr.nll[1][1]);
  r.claim("Post-LN needs the warm-up: without it every seed ends >= 0.2 nats worse (test NLL) than every seed with it; Pre-LN much less (its mean gap below half Post-LN's)",
          post_nowarm_best > post_warm_worst + 0.2 && pre_gap < 0.5 * post_gap,
          fmt::format("test NLL without - with warm-up: Post-LN {:.3f} (best without {:.3f}, worst with {:.3f}), Pre-LN {:.3f}", post_gap,
                      post_nowarm_best, post_warm_worst, pre_gap));
}

void run(Report& r) {
  Settings s{r.integer("d-model"), r.integer("heads"), r.integer("ff"), r.integer("layers"), r.integer("batches"), r.integer("max-tokens"),
             parse_increasing_ints(r.text("depths"), "lab norm: --depths"), r.integer("steps"), r.integer("warmup"), r.real("lr")};
  GF_CHECK(s.layers >= 2, "lab norm: --layers must be at least 2, got {}", s.layers);
  const IdData data = builtin_corpus(r.integer("pairs"), 1);
  r.say(fmt::format("built-in English -> Korean corpus: {} training pairs, vocabularies {} / {}; d_model {}, {} heads, FFN {}, no dropout",
                    data.train.size(), data.src_vocab, data.tgt_vocab, s.d_model, s.heads, s.ff));
  r.say("gradients: teacher-forced cross-entropy (mean per target token, PAD ignored) of one batch at initialisation,");
  r.say(fmt::format("averaged over the first {} batches ({} tokens at most) of each seed's order; the seed also draws the weights.",
                    s.batches, s.max_tokens));

  const LayerResult lr = layer_profile(r, data, s);
  const DepthResult dr = depth_sweep(r, data, s);
  const TrainResult tr = warmup_runs(r, data, s);
  check_claims(r, lr, dr, tr);
}

}  // namespace

Lab norm_lab() {
  Lab l;
  l.name = "norm";
  l.title = "Post-LN vs Pre-LN gradients at initialisation, and warm-up";
  l.reference = "Xiong et al. 2020, arXiv:2002.04745 (Theorem 1, Figure 3)";
  l.question = "Where does the gradient concentrate at initialisation with the LayerNorm after (Post-LN) or before (Pre-LN) each "
               "residual branch, how does it scale with depth, and which one needs a learning-rate warm-up?";
  l.default_seeds = 3;
  l.options = {{"pairs", Option::Int, "2000", "built-in corpus pairs (train split 90%)"},
               {"d-model", Option::Int, "64", "model width"},
               {"heads", Option::Int, "4", "attention heads"},
               {"ff", Option::Int, "256", "FFN width"},
               {"layers", Option::Int, "6", "layers in each stack for the per-layer profile and the training runs"},
               {"batches", Option::Int, "4", "batches per seed averaged at initialisation"},
               {"max-tokens", Option::Int, "512", "tokens per batch"},
               {"depths", Option::Text, "2,4,8,16", "depths (layers per stack) of the sweep"},
               {"steps", Option::Int, "150", "training steps of each warm-up run"},
               {"lr", Option::Real, "0.002", "learning rate of the warm-up runs"},
               {"warmup", Option::Int, "60", "warm-up steps (linear, then constant)"}};
  l.run = run;
  return l;
}

}  // namespace gf::lab
