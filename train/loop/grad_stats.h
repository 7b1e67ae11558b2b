#pragma once
// Gradient statistics for any training run (`gradflow train --grad-stats N`). At step 1 and every
// N-th step, per module group of the translator (embeddings; each layer's self-attention Q, K, V
// and output projection, with in_proj_weight's three row blocks apart; cross-attention likewise;
// feed-forward; norms; the final norms; the output projection): the gradient norm (before
// clipping), the parameter norm and the update/parameter ratio |p_after - p_before| / |p_before| of
// the Adam step actually applied; and the mean attention entropy of every head. One JSON line per
// recorded step in RUN/grad_stats.jsonl, drawn as one figure RUN/grad_stats.svg (groups x steps
// heat maps, one per statistic). docs/grad-stats.md has the format and the measured cost.
//
// The pieces are public for the labs: head_entropy() on any attention weights, EntropyProbe on
// every attention of a translator.
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "nn/decoder_only.h"
#include "nn/seq2seq.h"
#include "train/data/batching.h"
#include "train/run/model.h"

namespace gf::train {

using StatsJson = nlohmann::ordered_json;  // keys in the order written: "step" first

// ---------------------------------------------------------------- attention entropy

struct HeadEntropy {
  std::vector<double> heads;  // (H) mean over the counted query rows of -sum_s p log p, in nats
  double uniform = 0;         // mean over the same rows of log(keys visible): the largest possible entropy
  int64_t rows = 0;           // query rows counted (the same for every head)
};

// Per-head entropy of attention weights (B, H, L, S). A query row counts unless query_pad (B, L)
// bool marks it PAD (undefined: none is) or its weights sum to 0 (every key blocked). Keys visible
// from a row: those not marked by key_pad (B, S) bool (undefined: all), and with `causal` only
// s <= l. Masked keys have weight 0 and add nothing to the entropy.
HeadEntropy head_entropy(const Tensor& weights, const Tensor& query_pad, const Tensor& key_pad, bool causal);

// Every attention of a translator. Encoder-decoder: "enc0.self", ..., "dec0.self", "dec0.cross",
// ...; decoder-only: "layer0.self", ...
struct AttentionSite {
  enum Kind { EncoderSelf, DecoderSelf, Cross, SequenceSelf };  // SequenceSelf: the decoder-only model's
  std::string name;
  nn::MultiheadAttention* attention;
  Kind kind;
};
std::vector<AttentionSite> attention_sites(const nn::Seq2SeqTransformer& model);
std::vector<AttentionSite> attention_sites(const nn::DecoderOnlyTransformer& model);

// Per-head entropies of every attention of a translator, from the forwards it is armed for. It
// installs a weights_peek on each attention (calling any peek that was there before) and
// puts the old ones back when destroyed; disarmed, the peeks return at once.
class EntropyProbe {
 public:
  explicit EntropyProbe(const nn::Seq2SeqTransformer& model);
  explicit EntropyProbe(const nn::DecoderOnlyTransformer& model);
  ~EntropyProbe();
  EntropyProbe(const EntropyProbe&) = delete;
  EntropyProbe& operator=(const EntropyProbe&) = delete;

  // The coming forwards are model.forward(src, tgt_in) of the encoder-decoder: src (B, S), tgt_in
  // (B, T) ids. Which rows count and which keys are visible follow model.masks and the PAD id.
  void arm(const Tensor& src, const Tensor& tgt_in);
  // The coming forwards are model.forward(ids) of the decoder-only model: ids (B, L) (causal, PAD keys blocked).
  void arm(const Tensor& ids);
  // Entropies per site (attention_sites order), averaged over the forwards since arm(); disarms.
  // A site no forward reached has no heads.
  std::vector<std::pair<std::string, HeadEntropy>> take();
  // Wall seconds the observers spent on entropies since arm(): what the probe costs.
  double seconds() const { return seconds_; }

 private:
  struct Site;
  void install(const std::vector<AttentionSite>& sites);
  const nn::Seq2SeqTransformer* seq2seq_ = nullptr;
  int64_t pad_ = 0;
  std::vector<std::unique_ptr<Site>> sites_;
  bool armed_ = false;
  double seconds_ = 0;
};

// ---------------------------------------------------------------- parameter groups

// The group a parameter belongs to, by its state_dict name: "transformer.decoder.layers.1.linear2.weight"
// -> "dec1.ffn", "...multihead_attn.k_proj.weight" -> "dec1.cross.k", and for the decoder-only model
// "transformer.layers.0.norm1.weight" -> "layer0.norm"; in_proj_weight and in_proj_bias go to the
// ".q" group here (see grad_groups). Other names fall back to the module path (the name without
// its last part).
std::string group_of(const std::string& param_name);

struct GradGroup {
  struct Piece {
    std::string tensor;    // "transformer.encoder.layers.0.self_attn.in_proj_weight[0:64]"
    size_t param = 0;      // index into the parameter list the groups were made from
    int64_t begin = 0, end = 0;  // flat element range of that parameter
  };
  std::string name;  // "enc0.self.q"
  std::vector<Piece> pieces;
};
// Groups in order of first appearance; in_proj_weight (3D, D) and in_proj_bias (3D) are split into
// their Q, K and V row blocks. Tied weights (the same parameter under two names) count once.
std::vector<GradGroup> grad_groups(const std::vector<std::pair<std::string, Variable>>& named);

// ---------------------------------------------------------------- the recorder

class GradStatsRecorder {
 public:
  static constexpr const char* kJsonl = "grad_stats.jsonl";
  static constexpr const char* kSvg = "grad_stats.svg";

  // Records into dir/grad_stats.jsonl at step 1 and every `every` steps (every >= 1). With
  // resume_step > 0 the lines already there are kept for the figure and new ones appended; lines
  // past resume_step (written by a run killed before its next checkpoint) are dropped, as those
  // steps run again. Attention entropy is recorded for the encoder-decoder and the decoder-only
  // model (another module gets none).
  // grad_stats.jsonl is opened with O_NOFOLLOW and must be a regular file (tensor/io/plain_file.h):
  // a symbolic link there is refused, naming it, and its target left as it was.
  GradStatsRecorder(const TranslationModel& model, const std::string& dir, int64_t every, int64_t resume_step = 0);
  ~GradStatsRecorder();
  GradStatsRecorder(const GradStatsRecorder&) = delete;
  GradStatsRecorder& operator=(const GradStatsRecorder&) = delete;

  bool due(int64_t step) const { return only_.empty() ? step == 1 || step % every_ == 0 : only_.count(step) != 0; }
  // Records at exactly these steps instead (an experiment's named steps, `gradflow lab run`).
  void only_at(std::set<int64_t> steps) { only_ = std::move(steps); }
  // The trainer's step, in order: begin_step before the forward (1-based step; arms the entropy
  // probe when due), after_backward before clipping, after_update after the optimizer step. Each is
  // a no-op when the step is not due.
  void begin_step(int64_t step, const Batch& batch);
  void after_backward();
  void after_update(double loss, double lr);

  // grad_stats.svg from every line recorded (or kept) so far.
  void write_svg() const;
  const std::vector<StatsJson>& records() const { return records_; }

 private:
  StatsJson attention_json();  // the probe's entropies of this step, as the line's "attention"

  std::set<int64_t> only_;
  const TranslationModel& model_;
  std::string dir_;
  int64_t every_;
  std::vector<Variable> params_;
  std::vector<GradGroup> groups_;
  std::unique_ptr<EntropyProbe> probe_;  // null for a model it does not know
  int out_ = -1;                         // grad_stats.jsonl, appended to (open_own_file: a regular file, no link)
  std::vector<StatsJson> records_;
  // The step in progress when due (0: none), its gradient norms and the parameters before the update.
  int64_t step_ = 0;
  std::vector<double> grad_sq_;  // per piece of every group, in order: sum of squared gradients before clipping
  std::vector<Tensor> before_;   // per parameter, each its parameter's shape: a copy taken before the update
  double seconds_ = 0;           // wall time the recorder spent on this step so far
};

// ---------------------------------------------------------------- reading grad_stats.jsonl

// grad_stats.jsonl as its readers (a resumed run, gradflow report) take it: a regular file of at
// most kMaxGradStatsBytes, lines of at most kMaxGradStatsLineBytes, each nested at most
// json_fields::kMaxRunJsonDepth deep. A run folder someone hands over is outside input.
constexpr uint64_t kMaxGradStatsBytes = uint64_t{1} << 30;
constexpr size_t kMaxGradStatsLineBytes = size_t{16} << 20;

// One line, parsed (nesting bounded) and checked as the figure and the report read it: an object
// with an integer "step" (0 to 10^15), "loss" and "lr" (numbers or null), "groups" (an array of
// objects with a string "name" and "grad_norm", "param_norm" and "update_ratio", numbers or null),
// and optionally "attention" (an array of objects with a string "name", "entropy" an array of
// numbers or null, and "uniform" a number or null). Throws json_fields::FieldError naming the key
// ("missing field 'groups[3].name'"), or nlohmann's parse_error for text that is not JSON.
StatsJson parse_stats_record(std::string_view line);

// A statistic of a record: a number (one still in memory may hold NaN or Inf) or null (how the
// file writes a non-finite one), NaN for null; FieldError naming `key` otherwise. The _at form
// reads obj[key], `path` prefixing the key in errors.
double stats_number(const StatsJson& v, const std::string& key);
double stats_number_at(const StatsJson& obj, const char* key, const std::string& path = "");

// Calls each(line number, text) for every non-empty line of the grad_stats.jsonl at `path`, read
// as above (std::runtime_error naming the file, and the line, for a file or line over its bound,
// or a file that is not a regular file).
void for_each_stats_line(const std::string& path, const std::function<void(size_t, const std::string&)>& each);
// The same over text held in memory; `name` stands for the file in errors.
void for_each_stats_line_of(std::string_view text, const std::string& name, const std::function<void(size_t, const std::string&)>& each);

// The figure of grad_stats.jsonl's lines: heat maps of groups x steps (gradient norm, update ratio,
// parameter norm, log scale) and heads x steps (entropy / its uniform maximum), and the loss. With
// more than kMaxColumns lines it draws every k-th (and the last), so that the picture stays a
// picture. Throws std::invalid_argument when there is no line.
constexpr size_t kMaxColumns = 150;
std::string grad_stats_svg(const std::vector<StatsJson>& records);

}  // namespace gf::train
