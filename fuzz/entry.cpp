#include "fuzz/entry.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <unistd.h>
#include <typeinfo>

#include "app/command_flags.h"
#include "app/lab_page.h"
#include "app/report_page.h"
#include "app/run_report.h"
#include "app/train_args.h"
#include "lab/lab.h"
#include "tensor/io/atomic_file.h"
#include "train/data/subwords.h"
#include "train/eval/translator.h"
#include "tensor/io/safetensors.h"
#include "train/data/parallel_text.h"
#include "train/data/utf8.h"
#include "train/data/vocab.h"
#include "train/eval/bleu.h"
#include "train/run/checkpoint.h"
#include "train/run/run_config.h"
#include "train/plot/svg_plot.h"

namespace gf::fuzz {
namespace {

template <class... Args>
void require(bool cond, fmt::format_string<Args...> what, Args&&... args) {
  if (!cond) throw Finding{fmt::format(what, std::forward<Args>(args)...)};
}

// Reading back what the parsed value writes: any error there is a finding, not a rejection of the input.
template <class F>
auto read_back(const char* target, F&& read) {
  try {
    return read();
  } catch (const std::exception& e) {
    throw Finding{fmt::format("{}: the input parsed, but what it writes back does not read back: {}", target, e.what())};
  }
}

// A prefix of possibly binary text, printable in a finding's message.
std::string shown(std::string_view s) {
  std::string out;
  for (unsigned char c : s.substr(0, 80)) out += c >= 0x20 && c < 0x7F ? fmt::format("{}", char(c)) : fmt::format("\\x{:02x}", c);
  return s.size() > 80 ? out + "..." : out;
}

// ---- safetensors: load_safetensors_from_bytes (load_safetensors reads a file into the same decoder)
void run_safetensors(std::string_view input) {
  const SafetensorsFile f = load_safetensors_from_bytes(std::string(input), "fuzz.safetensors");
  // Written back and read again: the same tensors, bytes and metadata.
  const SafetensorsFile g = read_back("safetensors", [&] {
    return load_safetensors_from_bytes(safetensors_to_bytes(f.tensors, f.metadata), "fuzz.safetensors written back");
  });
  require(g.metadata == f.metadata, "safetensors: metadata changed when written back and read again");
  require(g.tensors.size() == f.tensors.size(), "safetensors: {} tensors became {}", f.tensors.size(), g.tensors.size());
  for (const auto& [name, t] : f.tensors) {
    auto it = g.tensors.find(name);
    require(it != g.tensors.end(), "safetensors: tensor '{}' lost when written back", shown(name));
    const Tensor& u = it->second;
    require(u.dtype() == t.dtype() && u.shape() == t.shape(), "safetensors: tensor '{}' changed dtype or shape", shown(name));
    require(u.nbytes() == t.nbytes() && (t.nbytes() == 0 || std::memcmp(u.raw_data(), t.raw_data(), t.nbytes()) == 0),
            "safetensors: tensor '{}' changed bytes", shown(name));
  }
}

// ---- a run folder's config.json: RunConfig::from_json (Translator::load and --resume read it)
void run_run_config(std::string_view input) {
  const train::RunConfig c = train::RunConfig::from_json(std::string(input), "config.json");
  // The trainer writes to_json(); it must read back as the same config.
  const std::string written = read_back("run_config", [&] { return c.to_json(); });
  const train::RunConfig d = read_back("run_config", [&] { return train::RunConfig::from_json(written, "config.json written back"); });
  require(d.to_json() == written, "run_config: config.json written back reads as another config");
}

// ---- a run folder's vocab.src.txt / vocab.tgt.txt: Vocab::parse (Vocab::load reads the file into it)
void run_vocab(std::string_view input) {
  const train::Vocab v = train::Vocab::parse(input, "vocab.src.txt");
  std::string written;  // Vocab::save's format: one token a line
  for (const std::string& w : v.tokens()) written += w + "\n";
  const train::Vocab w = read_back("vocab", [&] { return train::Vocab::parse(written, "vocab.src.txt written back"); });
  require(w.tokens() == v.tokens(), "vocab: written back reads as another vocabulary");
  for (int64_t i = 0; i < v.size(); ++i) require(v.id(v.token(i)) == i, "vocab: token {} does not map back to its id", i);
}

// ---- a run folder's state.json: state_from_json (load_state reads the file into it)
void run_run_state(std::string_view input) {
  const train::RunState s = train::state_from_json(std::string(input), "state.json");
  const std::string written = train::state_to_json(s);
  const train::RunState t = read_back("run_state", [&] { return train::state_from_json(written, "state.json written back"); });
  require(train::state_to_json(t) == written, "run_state: state.json written back reads as another state");
}

// ---- parallel text: parse_parallel_tsv and parse_parallel_texts (read_parallel_tsv/_files read files into them).
// The first byte picks the reader: odd -> one TSV text; even -> two aligned texts, split at the first NUL.
void run_parallel_text(std::string_view input) {
  const bool tsv = !input.empty() && (static_cast<unsigned char>(input[0]) & 1);
  if (!input.empty()) input.remove_prefix(1);
  train::ParallelText p;
  if (tsv) {
    p = train::parse_parallel_tsv(input, "fuzz.tsv");
  } else {
    const size_t nul = input.find('\0');
    const std::string_view src = input.substr(0, nul), tgt = nul == std::string_view::npos ? std::string_view() : input.substr(nul + 1);
    p = train::parse_parallel_texts(src, "fuzz.src", tgt, "fuzz.tgt");
  }
  require(p.stats.kept == p.pairs.size() && p.stats.lines == p.stats.kept + p.stats.skipped_empty,
          "parallel_text: stats lines {} kept {} skipped {} for {} pairs", p.stats.lines, p.stats.kept, p.stats.skipped_empty, p.pairs.size());
  for (const auto& [src, tgt] : p.pairs) {
    require(!src.empty() && !tgt.empty(), "parallel_text: a pair with an empty side was kept");
    for (const auto* side : {&src, &tgt})
      for (const std::string& tok : *side) {
        const std::vector<std::string> again = train::utf8::split_whitespace(tok);
        require(again.size() == 1 && again[0] == tok, "parallel_text: token '{}' is empty or holds whitespace", shown(tok));
      }
  }
}

// XML 1.0's Char production: what an SVG may contain.
bool xml_char(char32_t c) {
  return c == 0x9 || c == 0xA || c == 0xD || (c >= 0x20 && c <= 0xD7FF) || (c >= 0xE000 && c <= 0xFFFD) || (c >= 0x10000 && c <= 0x10FFFF);
}

// ---- UTF-8 handling: utf8::find_invalid / decode / encode / split_whitespace (every text reader),
// BLEU's Python-compatible split and 13a tokeniser (eval, bleu), and xml_escape (tokens in SVG labels).
void run_utf8(std::string_view input) {
  const std::string text(input);
  // xml_escape takes any bytes (tokens are checked UTF-8, titles are not) and must give XML text.
  const std::string escaped = xml_escape(text);
  require(train::utf8::is_valid(escaped), "utf8: xml_escape('{}') is not valid UTF-8", shown(text));
  for (char32_t c : train::utf8::decode(escaped))
    require(xml_char(c), "utf8: xml_escape('{}') keeps U+{:04X}, which XML 1.0 forbids", shown(text), static_cast<uint32_t>(c));

  const size_t bad = train::utf8::find_invalid(input);
  if (bad != std::string_view::npos) {
    require(bad < input.size() && train::utf8::is_valid(input.substr(0, bad)),
            "utf8: find_invalid says byte {} of '{}' but the text before it is not valid", bad, shown(text));
    train::utf8::decode(input);  // must reject (std::invalid_argument): the input's outcome
    throw Finding{fmt::format("utf8: decode accepted '{}', which find_invalid rejects at byte {}", shown(text), bad)};
  }
  const std::u32string cps = train::utf8::decode(input);
  for (char32_t c : cps)
    require(c <= 0x10FFFF && !(c >= 0xD800 && c <= 0xDFFF), "utf8: decode gave U+{:X}, not a scalar value", static_cast<uint32_t>(c));
  require(train::utf8::encode(cps) == text, "utf8: encode(decode('{}')) differs", shown(text));

  const std::vector<std::string> tokens = train::utf8::split_whitespace(input);
  require(tokens == split_whitespace(text), "utf8: utf8::split_whitespace and BLEU's split_whitespace disagree on '{}'", shown(text));
  for (const std::string& tok : tokens) {
    require(!tok.empty(), "utf8: split_whitespace gave an empty token for '{}'", shown(text));
    for (char32_t c : train::utf8::decode(tok)) require(!train::utf8::is_space(c), "utf8: token '{}' holds whitespace", shown(tok));
  }
  for (const char* tok : {"13a", "none"}) {
    const std::string t = bleu_tokenize(text, tok);
    require(train::utf8::is_valid(t), "utf8: bleu_tokenize('{}', {}) is not valid UTF-8", shown(text), tok);
  }
}

// An argument list, one argument per line or NUL-terminated.
std::vector<std::string> split_args(std::string_view input) {
  std::vector<std::string> args;
  for (size_t start = 0; start <= input.size();) {
    size_t end = input.find_first_of(std::string_view("\0\n", 2), start);
    if (end == std::string_view::npos) end = input.size();
    if (end > start || end < input.size()) args.emplace_back(input.substr(start, end - start));
    start = end + 1;
  }
  return args;
}

std::vector<char*> argv_of(std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  return argv;
}

// ---- the command line: `gradflow train ARGS` parsed and validated into RunConfig and TrainOptions,
// nothing run. The input is the argument list, one argument per line or NUL-terminated.
void run_cli(std::string_view input) {
  std::vector<std::string> args = split_args(input);
  std::vector<char*> argv = argv_of(args);
  app::Flags f = app::train_flags();
  if (!f.parse(static_cast<int>(args.size()), argv.data())) return;  // --help
  const train::TrainOptions opt = app::train_options(f);
  const train::RunConfig resumed;  // stands for the resumed run folder's config.json
  const train::RunConfig c = opt.resume ? app::train_config(f, &resumed) : app::train_config(f);
  // The trainer writes the config as config.json first thing; translate, eval and --resume read it back.
  const std::string written = read_back("cli", [&] { return c.to_json(); });
  require(read_back("cli", [&] { return train::RunConfig::from_json(written, "config.json of the parsed command line"); }).to_json() == written,
          "cli: the parsed config, written as config.json, reads back as another config");
}

// ---- every command's command line: `gradflow [global flags] COMMAND ARGS` (app/command_flags.h),
// the global flags, then the command's flags parsed and checked, nothing run. The input is the
// argument list after "gradflow", one argument per line or NUL-terminated; `lab NAME ...` takes
// that lab's flags.
void run_commands(std::string_view input) {
  std::vector<std::string> args = split_args(input);
  args.insert(args.begin(), "gradflow");
  std::vector<char*> argv = argv_of(args);
  const int argc = static_cast<int>(args.size());
  const app::GlobalFlags g = app::parse_global_flags(argc, argv.data());
  require(g.threads >= 0 && g.command >= 1 && g.command <= argc, "commands: global flags gave threads {} and command index {}", g.threads,
          g.command);
  if (g.help || g.version || g.command >= argc) return;
  const std::string name = args[static_cast<size_t>(g.command)];
  int first = g.command + 1;
  app::Flags f("", "");
  void (*check)(const app::Flags&) = nullptr;
  if (name == "lab" && first < argc && args[static_cast<size_t>(first)] == "all") {
    f = app::lab_all_flags();
    check = [](const app::Flags&) {};
    ++first;
  } else if (name == "lab") {
    if (first >= argc) return;  // `gradflow lab` lists the labs
    const lab::Lab* l = nullptr;
    try {
      l = &lab::find_lab(args[static_cast<size_t>(first)]);
    } catch (const std::invalid_argument& e) {
      throw app::UsageError(e.what());  // as cmd_lab reports it
    }
    f = app::lab_flags(*l, "runs/lab/" + l->name);
    check = app::check_lab_flags;
    ++first;
  } else {
    for (const app::CommandFlags& c : app::command_flags())
      if (name == c.name) f = c.flags(), check = c.check;
    if (!check) throw app::UsageError(fmt::format("unknown command '{}'", shown(name)));
  }
  if (!f.parse(argc - first, argv.data() + first)) return;  // --help
  check(f);
  // What --help shows for a parsed command line is text a terminal can print.
  require(train::utf8::is_valid(f.help()), "commands: {}'s --help is not valid UTF-8", name);
}

// ---- a run folder's config.json through Translator::load: a small run folder (vocabularies and a
// checkpoint of a tiny model) is written once; each input becomes its config.json. The loader
// must refuse a config that does not describe the checkpoint's model, or whose model would not
// fit, before building anything; one it loads must translate.
struct TranslatorFixture {
  std::string dir;
  TranslatorFixture() {
    char tmpl[] = "/tmp/gf_fuzz_translator_XXXXXX";
    if (!::mkdtemp(tmpl)) throw Finding{"translator_config: cannot create the fixture folder"};
    dir = tmpl;
    train::RunConfig c = fixture_config();
    std::vector<std::string> src{"<pad>", "<unk>", "<bos>", "<eos>", "a", "b", "c", "d"}, tgt{"<pad>", "<unk>", "<bos>", "<eos>", "x", "y", "z"};
    const train::Vocab vs(src), vt(tgt);
    vs.save(dir + "/vocab.src.txt");
    vt.save(dir + "/vocab.tgt.txt");
    const std::unique_ptr<train::TranslationModel> m = train::make_translation_model(c, vs, vt, 1);
    save_safetensors(dir + "/best.safetensors", m->module().state_dict());
  }
  static train::RunConfig fixture_config() {
    train::RunConfig c;
    c.layer.d_model = 8;
    c.layer.nhead = 2;
    c.layer.dim_feedforward = 16;
    c.layers = 1;
    return c;
  }
};

void run_translator_config(std::string_view input) {
  static const TranslatorFixture fixture;
  write_file_atomic(fixture.dir + "/config.json", std::string(input));
  const train::Translator t = train::Translator::load(fixture.dir);
  train::DecodeOptions o = t.default_decode_options();
  o.max_extra = 4;
  const std::vector<std::string> out = read_back("translator_config", [&] { return t.translate({"a b c"}, o); });
  require(out.size() == 1, "translator_config: one sentence in, {} out", out.size());
}

// ---- SentencePiece model files (spm.model): Subwords::parse (Subwords::load reads the file into
// it), then what loading a run does with one: its pieces as a vocabulary, checked against that
// vocabulary, and a sentence split and joined.
void run_subwords(std::string_view input) {
  const train::Subwords s = train::Subwords::parse(std::string(input), "spm.model");
  const train::Vocab v = s.vocab();
  train::check_vocab_matches(v, s, "vocab.src.txt");
  for (const char* text : {"Ein Mann fährt Fahrrad.", "제 친구는 책을 읽습니다.", "a"}) {
    const train::Tokens pieces = s.encode(text);
    for (const std::string& p : pieces)
      require(v.id(p) != train::Vocab::kUnk || p == v.token(train::Vocab::kUnk), "subwords: piece '{}' of '{}' is not in the model's vocabulary",
              shown(p), text);
    (void)s.decode(pieces);
  }
}

// The page's data as html_page embeds it (readable_json) must read back as the same data, and hold
// nothing that could end or confuse its <script> block.
void require_script_safe(const char* target, const nlohmann::json& data) {
  const std::string block = app::readable_json(data);
  require(block.find("</") == std::string::npos && block.find("<!") == std::string::npos, "{}: the page's data holds '</' or '<!'", target);
  const nlohmann::json back = read_back(target, [&] { return nlohmann::json::parse(block); });
  require(back == data, "{}: the page's data does not read back as itself", target);
}

// ---- a run folder's grad_stats.jsonl: app::grad_stats_data_of (grad_stats_data reads the file into
// the same code; each line through train::parse_stats_record, which a resumed run uses too)
void run_grad_stats(std::string_view input) {
  constexpr size_t kColumns = 8;
  const nlohmann::json g = app::grad_stats_data_of(input, "grad_stats.jsonl", kColumns);
  const size_t cols = g.at("steps").size(), groups = g.at("groups").size(), heads = g.at("heads").size();
  require(cols >= 1 && cols <= kColumns + 1, "grad_stats: {} columns drawn for at most {}", cols, kColumns);
  require(g.at("recorded").get<size_t>() >= cols, "grad_stats: {} columns of {} records", cols, g.at("recorded").get<size_t>());
  for (const char* key : {"grad_norm", "param_norm", "update_ratio"}) {
    require(g.at(key).size() == groups, "grad_stats: {} has {} rows for {} groups", key, g.at(key).size(), groups);
    for (const auto& row : g.at(key)) require(row.size() == cols, "grad_stats: a {} row has {} cells for {} columns", key, row.size(), cols);
  }
  for (const char* key : {"entropy", "uniform"}) {
    require(g.at(key).size() == heads, "grad_stats: {} has {} rows for {} heads", key, g.at(key).size(), heads);
    for (const auto& row : g.at(key)) require(row.size() == cols, "grad_stats: a {} row has {} cells for {} columns", key, row.size(), cols);
  }
  require_script_safe("grad_stats", g);
}

// ---- a lab's NAME.json: app::parse_lab_json (lab_page_data and write_lab_index read each lab's file
// into it), then the page's data of it (app::lab_page_data_of, its figures looked for in a folder
// that does not exist)
void run_lab_json(std::string_view input) {
  const nlohmann::json run = app::parse_lab_json(std::string(input), "fuzz.json");
  const std::string name = run.at("lab").get<std::string>();
  require(app::lab_name_ok(name) && name.find('/') == std::string::npos && name != "." && name != "..",
          "lab_json: the lab's name '{}' could leave the folder", shown(name));
  const nlohmann::json d = app::lab_page_data_of(run, "/nonexistent/gradflow-fuzz");
  require(d.at("lab").at("name") == name, "lab_json: the page's lab is not the file's");
  require_script_safe("lab_json", d);
}

}  // namespace

const std::vector<Target>& targets() {
  static const std::vector<Target> list = {
      {"safetensors", "gf::load_safetensors_from_bytes (tensor/io/safetensors.h)", run_safetensors},
      {"run_config", "gf::train::RunConfig::from_json (train/run/run_config.h)", run_run_config},
      {"vocab", "gf::train::Vocab::parse (train/data/vocab.h)", run_vocab},
      {"run_state", "gf::train::state_from_json (train/run/checkpoint.h)", run_run_state},
      {"parallel_text", "gf::train::parse_parallel_tsv, parse_parallel_texts (train/data/parallel_text.h)", run_parallel_text},
      {"utf8", "gf::train::utf8::*, gf::split_whitespace, gf::bleu_tokenize, gf::xml_escape", run_utf8},
      {"cli", "gf::app::Flags::parse with train_flags, train_options, train_config (app/train_args.h)", run_cli},
      {"commands", "gf::app::parse_global_flags, then every command's flags and checks (app/command_flags.h)", run_commands},
      {"translator_config", "gf::train::Translator::load of a run folder with this config.json (train/eval/translator.h)", run_translator_config},
      {"subwords", "gf::train::Subwords::parse, vocab, check_vocab_matches (train/data/subwords.h)", run_subwords},
      {"grad_stats", "gf::app::grad_stats_data_of, train::parse_stats_record (app/run_report.h, train/loop/grad_stats.h)", run_grad_stats},
      {"lab_json", "gf::app::parse_lab_json, lab_page_data_of (app/lab_page.h)", run_lab_json},
  };
  return list;
}

const Target& target(std::string_view name) {
  for (const Target& t : targets())
    if (name == t.name) return t;
  throw std::invalid_argument(fmt::format("no fuzz target named '{}'", name));
}

Outcome run_one(const Target& t, std::string_view input) {
  auto rejected = [&](const std::exception& e) {
    require(e.what() != nullptr && *e.what() != '\0', "{}: rejected the input with an empty message ({})", t.name, typeid(e).name());
    return Outcome{false, e.what()};
  };
  try {
    t.run(input);
    return {true, ""};
  } catch (const Finding&) {
    throw;
  } catch (const std::invalid_argument& e) {
    return rejected(e);
  } catch (const std::out_of_range& e) {
    return rejected(e);
  } catch (const std::runtime_error& e) {
    return rejected(e);
  } catch (const std::exception& e) {
    throw Finding{fmt::format("{}: unexpected exception {}: {}", t.name, typeid(e).name(), e.what())};
  } catch (...) {
    throw Finding{fmt::format("{}: an exception that is not a std::exception", t.name)};
  }
}

int fuzz_one(std::string_view target_name, const uint8_t* data, size_t size) {
  const Target& t = target(target_name);
  try {
    run_one(t, std::string_view(reinterpret_cast<const char*>(data), size));
  } catch (const Finding& f) {
    std::fprintf(stderr, "\n==== gradflow fuzz finding (%s): %s\n", t.name, f.what.c_str());
    std::abort();
  }
  return 0;
}

}  // namespace gf::fuzz
