#include "train/run/memory_estimate.h"

#include <fmt/core.h>

#include <cerrno>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string_view>

#include "nn/ffn.h"
#include "nn/norm.h"
#include "tensor/kernels/random.h"
#include "tensor/check.h"

namespace gf::train {
namespace {

constexpr double kPositions = 512;  // the positional table's rows (nn::Seq2SeqOptions, DecoderOnlyOptions)

// A norm's parameters over d features. Norms are chosen by name from a list others may extend
// (nn/norm.h), so the count is read from the kind itself: built at 1 and 2 features (a few bytes),
// and taken as affine in d (LayerNorm 2d, RMSNorm d, ScaleNorm 1).
double norm_parameters(const nn::TransformerLayerOptions& l) {
  const double n1 = static_cast<double>(nn::make_norm(l.norm, 1, l.layer_norm_eps)->num_parameters());
  const double n2 = static_cast<double>(nn::make_norm(l.norm, 2, l.layer_norm_eps)->num_parameters());
  return n1 + (n2 - n1) * (static_cast<double>(l.d_model) - 1);
}

// nn::MultiheadAttention with biases: packed in_proj (3d x d) for multi-head attention, or separate
// q, k and v projections when fewer key/value heads share the query heads; then out_proj.
double attention_parameters(const nn::TransformerLayerOptions& l) {
  const double d = static_cast<double>(l.d_model);
  const double kv = static_cast<double>(l.key_value_heads()) * (d / static_cast<double>(l.nhead));
  const double in = l.key_value_heads() == l.nhead ? 3 * d * d + 3 * d : (d * d + d) + 2 * (d * kv + kv);
  return in + d * d + d;
}

// The feed-forward block: the standard one is linear1 (d x ff) and linear2 (ff x d) with biases.
// Other kinds are registered by name (nn/ffn.h), so their count is read from the kind itself:
// built at four small sizes (a few hundred values) and taken as bilinear in d and ff, which any
// block of linear maps with biases is (SwiGLU: 3 d ff).
double feed_forward_parameters(const nn::TransformerLayerOptions& l) {
  const double d = static_cast<double>(l.d_model), ff = static_cast<double>(l.dim_feedforward);
  const nn::FeedForwardKind& kind = nn::find_feedforward(l.feedforward);
  if (!kind.make) return (d * ff + ff) + (ff * d + d);
  auto count = [&](int64_t dd, int64_t ffs) {
    nn::TransformerLayerOptions o = l;
    o.d_model = dd, o.dim_feedforward = ffs, o.nhead = 1, o.kv_heads = 0;
    Generator gen(1);
    return static_cast<double>(kind.make(o, gen)->num_parameters());
  };
  const double c11 = count(4, 4), c21 = count(8, 4), c12 = count(4, 8), c22 = count(8, 8);
  const double both = (c22 - c21 - c12 + c11) / 16, per_d = (c21 - c11) / 4 - 4 * both, per_ff = (c12 - c11) / 4 - 4 * both;
  const double constant = c11 - 4 * per_d - 4 * per_ff - 16 * both;
  return constant + per_d * d + per_ff * ff + both * d * ff;
}

bool decoder_only(const RunConfig& c) { return c.arch == "decoder-only"; }

// Floats one training step keeps per padded token and layer (see the header).
double activation_floats_per_token(const RunConfig& c) {
  const double d = static_cast<double>(c.layer.d_model), ff = static_cast<double>(c.layer.dim_feedforward);
  const double layers = static_cast<double>(c.layers);
  const double per_layer = decoder_only(c) ? 8 * d + ff : 9 * d + ff;
  return layers * per_layer + 4 * d;  // + embedding, positions and dropout of the input
}

std::string gib(double bytes) { return format_bytes(bytes); }

// The flag (or input) to change. Every size that weighs (doubling it would grow the estimate by at
// least half as much as doubling the heaviest one) is a candidate; of those, the one set furthest
// above its default is named (--ff 4294967296 rather than the --layers 3 it is multiplied by), and
// among defaults, the heaviest.
std::string heaviest(const RunConfig& c, int64_t vs, int64_t vt, int processes, bool training) {
  auto total = [&](const RunConfig& x, int64_t s, int64_t t) {
    return training ? training_memory(x, s, t, processes).total() : decoding_memory(x, s, t).total();
  };
  const double base = total(c, vs, vt);
  const RunConfig defaults;
  struct Candidate {
    std::string name;
    double growth, above_default;
  };
  std::vector<Candidate> candidates;
  auto doubled = [&](const std::string& name, double value, double default_value, auto set) {
    RunConfig x = c;
    set(x);
    candidates.push_back({name, total(x, vs, vt) - base, value / std::max(1.0, default_value)});
  };
  // Named as the flag for training, as config.json's field for a model being loaded.
  auto name = [&](const char* flag, const char* field, int64_t value) { return fmt::format("{} {}", training ? flag : field, value); };
  const nn::TransformerLayerOptions& l = c.layer;
  doubled(name("--d-model", "d_model", l.d_model), static_cast<double>(l.d_model), static_cast<double>(defaults.layer.d_model),
          [](RunConfig& x) { x.layer.d_model *= 2; });
  doubled(name("--ff", "dim_feedforward", l.dim_feedforward), static_cast<double>(l.dim_feedforward),
          static_cast<double>(defaults.layer.dim_feedforward), [](RunConfig& x) { x.layer.dim_feedforward *= 2; });
  doubled(name("--layers", "layers", c.layers), static_cast<double>(c.layers), static_cast<double>(defaults.layers), [](RunConfig& x) { x.layers *= 2; });
  if (training)
    doubled(fmt::format("--max-tokens {}", c.max_tokens / std::max(1, processes)), static_cast<double>(c.max_tokens),
            static_cast<double>(defaults.max_tokens), [](RunConfig& x) { x.max_tokens *= 2; });
  const std::string vocab = c.subwords > 0 ? name("--subwords", "subwords", c.subwords) : fmt::format("the vocabularies ({} and {} tokens)", vs, vt);
  candidates.push_back({vocab, total(c, 2 * vs, 2 * vt) - base, 1});
  double most = 0;
  for (const Candidate& k : candidates) most = std::max(most, k.growth);
  const Candidate* pick = nullptr;
  for (const Candidate& k : candidates)
    if (k.growth >= 0.5 * most && (!pick || k.above_default > pick->above_default || (k.above_default == pick->above_default && k.growth > pick->growth)))
      pick = &k;
  return pick->name;
}

double limit_or_available(double max_memory, std::string& what) {
  if (max_memory > 0) {
    what = fmt::format("--max-memory allows {}", gib(max_memory));
    return max_memory;
  }
  const double a = available_memory();
  what = fmt::format("{} are available (--max-memory sets the limit)", gib(a));
  return a;
}

// A number from a file holding one ("max" or unreadable: infinity).
double read_number(const std::string& file) {
  std::ifstream in(file);
  std::string s;
  if (!(in >> s) || s == "max") return std::numeric_limits<double>::infinity();
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  return end && *end == '\0' && v >= 0 ? v : std::numeric_limits<double>::infinity();
}

}  // namespace

double parameter_count(const RunConfig& c, int64_t src_vocab, int64_t tgt_vocab) {
  const nn::TransformerLayerOptions& l = c.layer;
  const double d = static_cast<double>(l.d_model), layers = static_cast<double>(c.layers);
  const double norm = norm_parameters(l), attention = attention_parameters(l), ff = feed_forward_parameters(l);
  const double encoder_layer = attention + ff + 2 * norm, decoder_layer = 2 * attention + ff + 3 * norm;
  if (decoder_only(c)) {  // one joint vocabulary: embedding, the stack and its final norm, the output
    const double v = static_cast<double>(src_vocab);
    return v * d + layers * encoder_layer + norm + (c.tie ? 0 : d * v) + v;
  }
  const double vs = static_cast<double>(src_vocab), vt = static_cast<double>(tgt_vocab);
  return vs * d + vt * d + layers * encoder_layer + norm + layers * decoder_layer + norm + (c.tie ? 0 : d * vt) + vt;
}

double checkpoint_values(const RunConfig& c, int64_t src_vocab, int64_t tgt_vocab) {
  const double d = static_cast<double>(c.layer.d_model);
  const double tied = c.tie ? d * static_cast<double>(decoder_only(c) ? src_vocab : tgt_vocab) : 0;  // out.weight again
  return parameter_count(c, src_vocab, tgt_vocab) + tied + kPositions * d;
}

MemoryEstimate training_memory(const RunConfig& c, int64_t src_vocab, int64_t tgt_vocab, int processes) {
  MemoryEstimate m;
  m.parameters = parameter_count(c, src_vocab, tgt_vocab);
  const double d = static_cast<double>(c.layer.d_model);
  m.state_bytes = 4 * 4 * m.parameters + kPositions * d * (4 + 8);
  if (processes > 1) m.state_bytes += 4 * m.parameters;  // the gradient buckets' flat copies
  const double tokens = static_cast<double>(c.max_tokens) / std::max(1, processes);
  m.activation_bytes = 4 * tokens * activation_floats_per_token(c);
  return m;
}

MemoryEstimate decoding_memory(const RunConfig& c, int64_t src_vocab, int64_t tgt_vocab) {
  MemoryEstimate m;
  m.parameters = parameter_count(c, src_vocab, tgt_vocab);
  m.state_bytes = 2 * 4 * m.parameters + kPositions * static_cast<double>(c.layer.d_model) * (4 + 8);
  return m;
}

double available_memory() {
  double available = -1;
  std::ifstream meminfo("/proc/meminfo");
  for (std::string key; meminfo >> key;) {
    double kib = 0;
    meminfo >> kib;
    if (key == "MemAvailable:") {
      available = kib * 1024;
      break;
    }
    meminfo.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  // cgroup v2 (a container or a job's limit), then v1.
  for (auto [limit, usage] : {std::pair{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"},
                              std::pair{"/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"}}) {
    const double l = read_number(limit), u = read_number(usage);
    if (std::isfinite(l) && std::isfinite(u) && l < 1e18) {
      const double left = std::max(0.0, l - u);
      available = available < 0 ? left : std::min(available, left);
      break;
    }
  }
  return available;
}

void check_training_memory(const RunConfig& c, int64_t src_vocab, int64_t tgt_vocab, int processes, double max_memory) {
  const MemoryEstimate m = training_memory(c, src_vocab, tgt_vocab, processes);
  std::string limit;
  const double allowed = limit_or_available(max_memory, limit);
  if (allowed < 0 || m.total() <= allowed) return;
  GF_FAIL_AS(std::runtime_error,
             "train: {}: the model needs {} for weights, gradients and Adam state ({:.0f} parameters) and {} for a step's activations; {}",
             heaviest(c, src_vocab, tgt_vocab, processes, true), gib(m.state_bytes), m.parameters, gib(m.activation_bytes), limit);
}

void check_decoding_memory(const RunConfig& c, int64_t src_vocab, int64_t tgt_vocab, const std::string& config_file, double max_memory) {
  const MemoryEstimate m = decoding_memory(c, src_vocab, tgt_vocab);
  std::string limit;
  const double allowed = limit_or_available(max_memory, limit);
  if (allowed < 0 || m.total() <= allowed) return;
  GF_FAIL_AS(std::runtime_error, "{} describes a model ({}) that needs {} for its weights ({:.0f} parameters); {}", config_file,
             heaviest(c, src_vocab, tgt_vocab, 1, false),
             gib(m.state_bytes), m.parameters, limit);
}

double decoding_row_bytes(const RunConfig& c, int64_t src_vocab, int64_t tgt_vocab) {
  const nn::TransformerLayerOptions& l = c.layer;
  const double d = static_cast<double>(l.d_model), ff = static_cast<double>(l.dim_feedforward), layers = static_cast<double>(c.layers);
  const double kv = static_cast<double>(l.key_value_heads()) * (d / static_cast<double>(l.nhead));  // a K or V row's width
  const double max_len = static_cast<double>(c.max_len);
  const double positions = decoder_only(c) ? kPositions : std::min(max_len + 50, kPositions - 2) + max_len;  // keys a row caches
  const double vocab = static_cast<double>(decoder_only(c) ? std::max(src_vocab, tgt_vocab) : tgt_vocab);
  return 4 * (layers * 2 * kv * positions + 2 * vocab + 4 * d + ff);
}

void check_decoding_rows_memory(const RunConfig& c, int64_t src_vocab, int64_t tgt_vocab, int64_t batch, int64_t beam, double max_memory) {
  const double rows = static_cast<double>(batch) * static_cast<double>(beam);
  const double weights = decoding_memory(c, src_vocab, tgt_vocab).total(), per_rows = rows * decoding_row_bytes(c, src_vocab, tgt_vocab);
  std::string limit;
  const double allowed = limit_or_available(max_memory, limit);
  if (allowed < 0 || weights + per_rows <= allowed) return;
  GF_FAIL_AS(std::runtime_error,
             "--batch-size {} x --beam {} = {:.0f} rows decoded at once need {} for their KV caches and scores beside {} for the weights; "
             "{} (lower --batch-size or --beam)",
             batch, beam, rows, gib(per_rows), gib(weights), limit);
}

double parse_memory_size(const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  GF_CHECK(!text.empty() && end != text.c_str() && errno == 0 && std::isfinite(v) && v > 0,
           "a memory size must be a positive number of bytes with an optional unit (K, M, G, T), got '{}'", text);
  std::string unit(end);
  for (const char* suffix : {"iB", "B"})
    if (unit.size() > 1 && unit.ends_with(suffix)) {
      unit.resize(unit.size() - std::string_view(suffix).size());
      break;
    }
  static const std::pair<const char*, double> units[] = {{"", 1}, {"K", 1024.0}, {"M", 1024.0 * 1024}, {"G", 1024.0 * 1024 * 1024},
                                                         {"T", 1024.0 * 1024 * 1024 * 1024}};
  for (const auto& [u, scale] : units)
    if (unit == u) return v * scale;
  GF_FAIL("a memory size's unit must be K, M, G or T (binary: G = 2^30 bytes), got '{}' in '{}'", unit, text);
}

std::string format_bytes(double bytes) {
  if (!std::isfinite(bytes)) return "an unbounded amount";
  static const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (bytes >= 1024 && u < 6) bytes /= 1024, ++u;
  if (u == 0) return fmt::format("{:.0f} bytes", bytes);
  return bytes >= 100 ? fmt::format("{:.0f} {}", bytes, units[u]) : fmt::format("{:.1f} {}", bytes, units[u]);
}

}  // namespace gf::train
