// gradflow bench end to end on a tiny generated data folder (JSON keys and positive numbers, usage
// errors), and the fixed-length greedy decoding it relies on (DecodeOptions::stop_at_eos = false).
#include <doctest/doctest.h>

#include <cmath>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "app/precision_choice.h"
#include "autograd/grad_mode.h"
#include "nn/seq2seq.h"
#include "train/decode/decode.h"
#include "nn_test_util.h"

using namespace gf;
namespace fs = std::filesystem;

namespace {

std::string gradflow() { return std::string(GRADFLOW_BINARY_DIR) + "/gradflow"; }

struct Run {
  int status = -1;  // exit code
  std::string out;  // stdout
};

Run run(const std::string& args) {
  Run r;
  std::string cmd = gradflow() + " " + args + " 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) r.out.append(buf, n);
  int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

// A few dozen lines of made-up parallel text: train.{de,en} and test_2016_flickr.de.
fs::path tiny_data() {
  fs::path dir = fs::temp_directory_path() / ("gradflow_test_bench_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const char* de[] = {"ein", "hund", "läuft", "im", "park", "eine", "frau", "liest", "das", "buch"};
  const char* en[] = {"a", "dog", "runs", "in", "the", "park", "woman", "reads", "book", "."};
  std::ofstream sde(dir / "train.de"), sen(dir / "train.en"), tde(dir / "test_2016_flickr.de");
  for (int i = 0; i < 48; ++i) {
    int n = 3 + i % 6;  // 3..8 tokens
    for (int j = 0; j < n; ++j) {
      sde << (j ? " " : "") << de[(i + 3 * j) % 10];
      sen << (j ? " " : "") << en[(i + 7 * j) % 10];
    }
    sde << "\n";
    sen << "\n";
    if (i < 11) {
      for (int j = 0; j < n; ++j) tde << (j ? " " : "") << de[(2 * i + j) % 10];
      tde << "\n";
    }
  }
  return dir;
}

const std::string kTiny = " --d-model 16 --heads 2 --layers 1 --ff 32 --min-freq 1 --threads 1";

void check_positive(const nlohmann::json& j, const char* key) {
  INFO(key << " in " << j.dump());
  REQUIRE(j.contains(key));
  REQUIRE(j[key].is_number());
  CHECK(j[key].get<double>() > 0);
}

}  // namespace

TEST_CASE("gradflow bench train and decode print one JSON line with the reference's keys") {
  fs::path dir = tiny_data();
  SUBCASE("train") {
    // float32: mfu below is checked against the sgemm peak, which bf16 (auto's choice where it pays) does not use.
    Run r = run("bench train --data " + dir.string() + kTiny + " --max-tokens 64 --steps 2 --warmup 10 --precision fp32");
    REQUIRE(r.status == 0);
    nlohmann::json j = nlohmann::json::parse(r.out);  // throws unless the output is exactly one JSON value
    CHECK(j["impl"] == "gradflow");
    CHECK(j["steps"] == 2);
    CHECK(j["threads"] == 1);
    CHECK(j["d_model"] == 16);
    CHECK(j["max_tokens"] == 64);
    CHECK(j["blas_core"].is_string());
    CHECK(j["precision"] == "fp32");
    CHECK(j["precision_requested"] == "fp32");
    for (const char* k : {"params", "src_vocab", "tgt_vocab", "heads", "layers", "ff", "seconds", "tgt_tokens_per_s", "src_tokens_per_s",
                          "peak_rss_mib", "model_gflops_per_s", "sgemm_peak_gflops_per_s", "mfu"})
      check_positive(j, k);
    CHECK(j["src_vocab"] == 14);  // 10 words + 4 specials
    const double model = j["model_gflops_per_s"].get<double>(), peak = j["sgemm_peak_gflops_per_s"].get<double>(), ratio = model / peak;
    // Equal up to the printed rounding: mfu to 3 decimals (an absolute 0.0005, which for this tiny
    // model's mfu of about 0.01 is several percent), the two rates to 2.
    CHECK(std::abs(j["mfu"].get<double>() - ratio) <= 0.0005 + ratio * 0.005 * (1 / model + 1 / peak) + 1e-9);
  }
  SUBCASE("decode") {
    Run r = run("bench decode --data " + dir.string() + kTiny + " --decode-batch 4");
    REQUIRE(r.status == 0);
    nlohmann::json j = nlohmann::json::parse(r.out);
    CHECK(j["impl"] == "gradflow");
    CHECK(j["test"] == "test_2016_flickr");
    CHECK(j["decode_batch"] == 4);
    CHECK(j["kv_cache"] == true);
    CHECK(j["precision_requested"] == "auto");  // the default
    CHECK(j["precision"] == precision_name(app::choose_auto_precision(app::this_cpu()).precision));
    for (const char* k : {"params", "seconds", "sentences_per_s", "tokens_per_s", "gemm_gflop", "peak_rss_mib"}) check_positive(j, k);
    // 11 sentences of 3,4,5,6 | 7,8,3,4 | 5,6,7 tokens in batches of 4, each decoded for (longest
    // source + 20) steps: 4 * 26 + 4 * 28 + 3 * 27 = 297 tokens.
    const double tokens = j["tokens_per_s"].get<double>() / j["sentences_per_s"].get<double>() * 11;
    CHECK(tokens == doctest::Approx(297).epsilon(0.01));
  }
  SUBCASE("decode without the KV cache") {
    Run r = run("bench decode --data " + dir.string() + kTiny + " --decode-batch 4 --no-cache");
    REQUIRE(r.status == 0);
    nlohmann::json j = nlohmann::json::parse(r.out);
    CHECK(j["kv_cache"] == false);
    check_positive(j, "sentences_per_s");
  }
  SUBCASE("decode with beam search") {
    Run r = run("bench decode --data " + dir.string() + kTiny + " --decode-batch 4 --beam 3");
    REQUIRE(r.status == 0);
    nlohmann::json j = nlohmann::json::parse(r.out);
    CHECK(j["beam"] == 3);
    check_positive(j, "sentences_per_s");
  }
  fs::remove_all(dir);
}

TEST_CASE("gradflow bench rejects bad arguments with usage errors (exit code 2)") {
  fs::path dir = tiny_data();
  CHECK(run("bench fly --data " + dir.string()).status == 2);
  CHECK(run("bench train").status == 2);                                          // no --data
  CHECK(run("bench train --data " + dir.string() + "/nowhere").status == 2);     // not a folder
  CHECK(run("bench train --data " + dir.string() + " --steps 0").status == 2);
  CHECK(run("bench decode --data " + dir.string() + " --decode-batch 0").status == 2);
  CHECK(run("bench decode --data " + dir.string() + " --beam 0").status == 2);
  CHECK(run("bench train --data " + dir.string() + " --d-model 30 --heads 4").status == 2);
  CHECK(run("bench decode --data " + dir.string() + " --test missing" + kTiny).status == 1);  // runtime error: no such file
  fs::remove_all(dir);
}

TEST_CASE("greedy decoding with stop_at_eos = false runs every row for longest source + max_extra steps") {
  nn::Seq2SeqOptions o = gf::testing::decoding_options(9);
  o.tgt_vocab = 7;
  nn::Seq2SeqTransformer model(o, 3);
  model.eval();
  {
    NoGradGuard ng;  // make <eos> win every step by a mile
    model.out->bias.data().select(0, 3).fill_(100.0);
  }
  Tensor src = Tensor::from_vector(std::vector<int64_t>{4, 5, 6, 0, 7, 8, 0, 0}, {2, 4});  // (2, 4): lengths 3 and 2
  train::DecodeOptions opt;
  opt.max_extra = 5;
  for (bool cache : {true, false}) {
    INFO("use_cache " << cache);
    opt.use_cache = cache;
    opt.stop_at_eos = true;
    auto stopped = train::translate_batch(model, src, opt);
    REQUIRE(stopped.size() == 2);
    CHECK(stopped[0].empty());  // <eos> first: nothing
    CHECK(stopped[1].empty());
    opt.stop_at_eos = false;
    auto fixed = train::translate_batch(model, src, opt);
    REQUIRE(fixed.size() == 2);
    for (const auto& row : fixed) {
      CHECK(row.size() == 3 + 5);  // the longest source (3) + max_extra, for the shorter row too
      for (int64_t t : row) CHECK(t == 3);
    }
  }
  opt.beam = 2;
  CHECK_THROWS_WITH_AS(train::translate_batch(model, src, opt), doctest::Contains("greedy decoding only"), std::invalid_argument);
}
