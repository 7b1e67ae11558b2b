// SentencePiece subwords: the round trip raw -> pieces -> ids -> pieces -> raw, the run folder's
// models and their checks, the size errors, and raw text through the command line.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "temp_dir.h"
#include "korean/corpus_raw.h"
#include "train/run/run_subwords.h"
#include "train/data/subwords.h"
#include "train/eval/translator.h"
#include "train/loop/trainer.h"

#include "tiny_run.h"

using namespace gf::train;
namespace fs = std::filesystem;

namespace {

using TempDir = gf::test::TempDir;

// The built-in corpus as raw text (capitals, attached punctuation and Korean particles).
const CorpusSplits& raw_corpus() {
  static const CorpusSplits c = render_raw(make_korean_corpus(1, 3000));
  return c;
}

std::vector<std::string> both_sides(const std::vector<SentencePair>& pairs) {
  std::vector<std::string> text;
  for (const auto& p : pairs) text.insert(text.end(), {p.src, p.tgt});
  return text;
}

// raw -> pieces -> ids -> pieces -> raw
std::string round_trip(const Subwords& sp, const Vocab& vocab, const std::string& raw) {
  const std::vector<int64_t> ids = vocab.encode(sp.encode(raw));
  for (int64_t id : ids) REQUIRE_MESSAGE(id != Vocab::kUnk, "an <unk> id in '" << raw << "'");
  return sp.decode(vocab.decode(ids));
}

std::string slurp(const fs::path& file) {
  std::ifstream in(file);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

struct Cli {
  int status = -1;
  std::string out;  // stdout and stderr
};

Cli gradflow(const std::string& args) {
  Cli r;
  const std::string cmd = std::string(GRADFLOW_BINARY_DIR) + "/gradflow " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) r.out.append(buf, n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

}  // namespace

TEST_CASE("subwords: raw text round-trips exactly, seen or unseen, in both languages and model types") {
  for (const std::string type : {"unigram", "bpe"}) {
    CAPTURE(type);
    const Subwords sp = Subwords::train(both_sides(raw_corpus().train), {.vocab_size = 1000, .type = type}, "the raw corpus");
    const Vocab vocab = sp.vocab();
    CHECK(vocab.size() == 1000);
    CHECK(vocab.token(Vocab::kPad) == "<pad>");  // gradflow's ids are the model's ids
    CHECK(vocab.token(Vocab::kEos) == "<eos>");
    size_t checked = 0;
    for (const auto* split : {&raw_corpus().train, &raw_corpus().valid, &raw_corpus().test})
      for (const SentencePair& p : *split) {
        REQUIRE(round_trip(sp, vocab, p.src) == p.src);
        REQUIRE(round_trip(sp, vocab, p.tgt) == p.tgt);
        checked += 2;
      }
    CHECK(checked == 6000);
    // Characters the model never saw come back through their bytes, not as <unk>.
    for (const std::string s : {"Zürich, 漢字 & naïve café!", "Ünïcödé: 你好, мир; שלום.", "Tabs\tand  double  spaces"}) {
      const std::string normalised = s == "Tabs\tand  double  spaces" ? "Tabs and double spaces" : s;  // runs of spaces become one
      CHECK(round_trip(sp, vocab, s) == normalised);
    }
  }
}

TEST_CASE("subwords: the pieces are subwords, not characters or whole sentences") {
  // (1000 pieces: about 620 of them are the characters of both languages and the 256 bytes)
  const Subwords sp = Subwords::train(both_sides(raw_corpus().train), {.vocab_size = 1000}, "the raw corpus");
  const Tokens pieces = sp.encode("My friend reads a book.");
  CHECK(pieces.size() >= 5);   // at least one piece a word, and the full stop
  CHECK(pieces.size() <= 10);  // frequent words are whole pieces
  CHECK(std::find(pieces.begin(), pieces.end(), "▁friend") != pieces.end());
}

TEST_CASE("subwords: a vocabulary too small or too large for the text says which sizes work") {
  const std::vector<std::string> text = both_sides(raw_corpus().train);
  try {
    (void)Subwords::train(text, {.vocab_size = 100}, "the raw corpus");
    FAIL("no error for --subwords 100");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()).find("--subwords 100 is too small for the raw corpus") != std::string::npos);
    CHECK(std::string(e.what()).find("need at least") != std::string::npos);
  }
  try {
    (void)Subwords::train(text, {.vocab_size = 100000}, "the raw corpus");
    FAIL("no error for --subwords 100000");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()).find("--subwords 100000 is more than the raw corpus can fill") != std::string::npos);
    CHECK(std::string(e.what()).find("at most") != std::string::npos);
  }
  CHECK_THROWS_WITH_AS(Subwords::train(text, {.vocab_size = 500, .type = "word"}, "x"), doctest::Contains("unigram or bpe"),
                       std::invalid_argument);
}

TEST_CASE("subwords: the run config checks its subword settings") {
  RunConfig c;
  c.joint_vocab = true;
  CHECK_THROWS_WITH_AS(c.validate(), doctest::Contains("--joint-vocab needs --subwords"), std::invalid_argument);
  c = RunConfig();
  c.arch = "decoder-only";
  c.subwords = 500;
  CHECK_THROWS_WITH_AS(c.validate(), doctest::Contains("needs --joint-vocab"), std::invalid_argument);
  c.joint_vocab = true;
  CHECK_NOTHROW(c.validate());
  c = RunConfig::from_json(c.to_json(), "config.json");
  CHECK(c.subwords == 500);
  CHECK(c.joint_vocab);
}

// A run folder trained for a few steps on the raw corpus with subwords.
struct TinyRun {
  TempDir dir;
  fs::path run;
  explicit TinyRun(bool joint, const std::string& arch = "encoder-decoder") {
    const fs::path data = dir.path / "data";
    fs::create_directories(data);
    save_corpus(raw_corpus(), data);
    RunConfig c = gf::test::tiny_run();
    c.data = data.string();
    c.subwords = joint ? 1000 : 620;  // each side's characters and the 256 bytes fit, and the text fills it
    c.joint_vocab = joint;
    c.arch = arch;
    c.steps = 3;
    c.max_tokens = 1024;
    run = dir.path / "run";
    train_translator(c, gf::test::quiet_options(run.string()));
  }
};

TEST_CASE("subwords: the run folder keeps its models, and translate reads raw text and writes raw text") {
  for (const bool joint : {false, true}) {
    CAPTURE(joint);
    TinyRun r(joint);
    for (const std::string& f : subword_model_files(RunConfig{.subwords = 620, .joint_vocab = joint})) CHECK(fs::exists(r.run / f));
    const Translator t = Translator::load(r.run.string());
    REQUIRE(t.segmenters.src.subwords() != nullptr);
    CHECK(t.bleu_tokenize() == "13a");
    Translator::Pieces pieces;
    const std::vector<std::string> out = t.translate({"My friend reads a book.", ""}, t.default_decode_options(), 64, nullptr, &pieces);
    REQUIRE(out.size() == 2);
    CHECK(out[1].empty());
    CHECK(pieces.source[0].front().starts_with("▁M"));  // a subword piece, not the whitespace token "My"
    CHECK(out[0] == t.segmenters.tgt.join(pieces.output[0]));  // the output is the pieces detokenised
    CHECK(out[0].find("▁") == std::string::npos);
    // Resuming reads the same models back and trains on.
    RunConfig more = RunConfig::from_json(slurp(r.run / "config.json"), "config.json");
    more.steps = 5;
    TrainOptions o = gf::test::quiet_options(r.run.string());
    o.resume = true;
    CHECK(train_translator(more, o).steps == 5);
  }
}

TEST_CASE("subwords: the decoder-only model shares one subword vocabulary with <sep>") {
  TinyRun r(true, "decoder-only");
  const Translator t = Translator::load(r.run.string());
  CHECK(t.src_vocab.token(4) == "<sep>");
  CHECK(t.translate({"We like music."}, t.default_decode_options()).size() == 1);
}

TEST_CASE("subwords: a missing or mismatched model file in the run folder is a clear error") {
  TinyRun r(false);
  SUBCASE("missing") {
    fs::remove(r.run / "spm.tgt.model");
    CHECK_THROWS_WITH_AS(Translator::load(r.run.string()), doctest::Contains("spm.tgt.model' does not exist"), std::runtime_error);
  }
  SUBCASE("another model's pieces") {
    // A model retrained with another size: its pieces are not the checkpoint's vocabulary.
    std::vector<std::string> ko;
    for (const auto& p : raw_corpus().train) ko.push_back(p.tgt);
    Subwords::train(ko, {.vocab_size = 600}, "korean").save(r.run / "spm.tgt.model");
    CHECK_THROWS_WITH_AS(Translator::load(r.run.string()), doctest::Contains("the subword model does not match the vocabulary"),
                         std::invalid_argument);
  }
  SUBCASE("not a model") {
    std::ofstream(r.run / "spm.src.model") << "hello";
    CHECK_THROWS_WITH_AS(Translator::load(r.run.string()), doctest::Contains("is not a SentencePiece model"), std::runtime_error);
  }
}

TEST_CASE("subwords: the command line trains on a raw TSV, translates raw text and scores with 13a") {
  TempDir dir;
  const std::string d = dir.path.string();
  REQUIRE(gradflow("corpus --raw --tsv --size 3000 --out " + d + "/raw").status == 0);
  CHECK(slurp(dir.path / "raw" / "train.tsv").find("My ") != std::string::npos);
  const std::string data = "--data " + d + "/raw/train.tsv --valid-split " + d + "/raw/valid.tsv --test-split " + d + "/raw/test.tsv";
  const Cli bad = gradflow("train " + data + " --subwords 5000 --steps 1 --quiet --out " + d + "/bad");
  CHECK(bad.status != 0);
  CHECK(bad.out.find("--subwords 5000 is more than the source side of the training text can fill") != std::string::npos);

  const Cli train = gradflow("train " + data + " --subwords 620 --d-model 32 --heads 2 --ff 64 --layers 1 --steps 3 --samples 1 --quiet --out " +
                             d + "/run");
  REQUIRE_MESSAGE(train.status == 0, train.out);
  CHECK(train.out.find("SentencePiece unigram") != std::string::npos);
  CHECK(train.out.find("tok:13a") != std::string::npos);  // the test report's BLEU signature
  std::ofstream(dir.path / "in.txt") << "My friend reads a book.\nWe like music!\n";
  const Cli tr = gradflow("translate --model " + d + "/run --input " + d + "/in.txt --verbose");
  REQUIRE(tr.status == 0);
  CHECK(tr.out.find("source pieces: ▁M") != std::string::npos);
  const Cli att = gradflow("attention --model " + d + "/run --src \"My friend reads a book.\" --out " + d + "/att.svg");
  REQUIRE_MESSAGE(att.status == 0, att.out);
  CHECK(slurp(dir.path / "att.svg").find("▁friend") != std::string::npos);  // the axes show the pieces
  const Cli ev = gradflow("eval --model " + d + "/run");
  REQUIRE(ev.status == 0);
  CHECK(ev.out.find("BLEU|nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.x = ") != std::string::npos);
  CHECK(gradflow("eval --model " + d + "/run --tokenize none").out.find("tok:none") != std::string::npos);
}
