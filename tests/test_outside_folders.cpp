// A folder someone hands gradflow is outside input (issue 50): a run folder or a lab's output made
// by someone else may hold links, FIFOs, devices, huge or deeply nested files, malformed JSON and
// names chosen to escape the folder or the page. Each case builds such a folder and runs the real
// code on it: a clear error naming the file and what is wrong, nothing written outside the folder,
// nothing of the user's lost. Most cases run build/gradflow; the rest call the library.
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <functional>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/lab_page.h"
#include "app/report_page.h"
#include "app/run_report.h"
#include "korean/corpus_ko.h"
#include "tensor/io/safetensors.h"
#include "tests/child_process.h"
#include "tests/temp_dir.h"
#include "tests/tiny_run.h"
#include "tests/toy_lab.h"
#include "train/data/vocab.h"
#include "train/loop/grad_stats.h"
#include "train/loop/interrupt.h"
#include "train/loop/run_lock.h"
#include "train/loop/trainer.h"
#include "train/run/checkpoint.h"
#include "train/run/model.h"
#include "train/run/run_config.h"

using namespace gf;
using gf::test::Ran;
using gf::test::slurp;
using gf::test::TempDir;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kBinary = GRADFLOW_BINARY_DIR "/gradflow";

Ran gradflow(const std::vector<std::string>& args, const TempDir& tmp, const std::string& tag, const gf::test::ChildOptions& o = {}) {
  return gf::test::run_child(kBinary, args, tmp.path / tag, 120, o);
}

// A tiny trained run of the built-in corpus in tmp/NAME (4 steps: the files, not the model, are under test).
fs::path trained(const TempDir& tmp, const std::string& name = "run") {
  train::RunConfig c = gf::test::tiny_run(600);
  c.steps = 4;
  const train::TrainOptions o = gf::test::quiet_options((tmp.path / name).string());
  train::train_translator(c, o);
  return o.out;
}

// name -> bytes of every file of a folder (links as "-> target"), recursively.
std::map<std::string, std::string> listing(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    const std::string rel = fs::relative(e.path(), dir).string();
    if (e.is_symlink()) out[rel] = "-> " + fs::read_symlink(e.path()).string();
    else if (e.is_regular_file()) out[rel] = slurp(e.path());
    else out[rel] = "(other)";
  }
  return out;
}

// A .safetensors file's tensors with its metadata, rewritten through gradflow's writer (which
// records a fresh digest).
void rewrite_weights(const fs::path& file, const std::function<void(std::map<std::string, Tensor>&)>& change) {
  SafetensorsFile f = load_safetensors(file.string());
  change(f.tensors);
  save_safetensors(file.string(), f.tensors, f.metadata);
}

// No memory a child could exhaust: 4 GiB of address space (not under AddressSanitizer).
gf::test::ChildOptions bounded() {
  gf::test::ChildOptions o;
  o.address_space_limit = 4LL << 30;
  return o;
}

const std::string kVictim = "a file of the user's that must stay as it is\n";

}  // namespace

TEST_CASE("the signal handler leaves errno as the interrupted code had it") {
  // With stderr closed the handler's write(2) fails with EBADF: before the fix that leaked into the
  // errno of whatever code the signal interrupted.
  const int saved = ::dup(STDERR_FILENO);
  REQUIRE(saved >= 0);
  int seen = 0, signal_seen = 0;
  {
    train::InterruptGuard guard;
    ::close(STDERR_FILENO);
    errno = EDOM;  // what the interrupted code had
    ::raise(SIGINT);
    seen = errno;
    ::dup2(saved, STDERR_FILENO);
    signal_seen = train::interrupt_signal();
  }
  ::close(saved);
  CHECK(signal_seen == SIGINT);
  CHECK(seen == EDOM);
}

TEST_CASE("a lock file that is a symbolic link or a FIFO is refused, naming it; the link's target is not emptied") {
  TempDir tmp("gf_outside");
  tmp.write("victim.txt", kVictim);
  fs::create_directories(tmp.path / "run");
  fs::create_symlink(tmp.path / "victim.txt", tmp.path / "run" / train::RunFolderLock::kFileName);
  CHECK_THROWS_WITH_AS(train::RunFolderLock::take((tmp.path / "run").string(), "--resume"), doctest::Contains("is a symbolic link"),
                       std::runtime_error);
  CHECK(slurp(tmp.path / "victim.txt") == kVictim);  // before the fix: emptied by the lock's ftruncate
  // A FIFO: refused at once (opening one for writing could wait for a reader).
  fs::create_directories(tmp.path / "fifo");
  REQUIRE(::mkfifo((tmp.path / "fifo" / train::RunFolderLock::kFileName).c_str(), 0600) == 0);
  CHECK_THROWS_WITH_AS(train::RunFolderLock::take((tmp.path / "fifo").string(), "--out"), doctest::Contains("FIFO"), std::runtime_error);
}

TEST_CASE("grad_stats.jsonl that is a symbolic link is refused, naming it; the link's target is not overwritten") {
  TempDir tmp("gf_outside");
  tmp.write("victim.txt", kVictim);
  train::RunConfig c = gf::test::tiny_run();
  std::vector<std::string> tokens(train::Vocab::kSpecials.begin(), train::Vocab::kSpecials.end());
  tokens.push_back("a");
  const train::Vocab v(tokens);
  const auto model = train::make_translation_model(c, v, v, 1);
  fs::create_directories(tmp.path / "run");
  fs::create_symlink(tmp.path / "victim.txt", tmp.path / "run" / train::GradStatsRecorder::kJsonl);
  for (const int64_t resume_step : {int64_t{0}, int64_t{5}}) {
    CAPTURE(resume_step);
    CHECK_THROWS_WITH_AS(train::GradStatsRecorder(*model, (tmp.path / "run").string(), 1, resume_step),
                         doctest::Contains("grad_stats.jsonl' is a symbolic link"), std::runtime_error);
    CHECK(slurp(tmp.path / "victim.txt") == kVictim);  // before the fix: truncated (a new run) through the link
  }
}

TEST_CASE("save_corpus writes through the atomic writer: a link at the old predictable temporary name is not followed") {
  TempDir tmp("gf_outside");
  tmp.write("victim.txt", kVictim);
  const fs::path data = tmp.path / "data";
  fs::create_directories(data);
  // The old writer's temporary file was FILE.tmp.PID, opened through any link already there.
  for (const char* name : {"train.en", "train.ko", "val.en", "val.ko", "test.en", "test.ko"})
    fs::create_symlink(tmp.path / "victim.txt", data / (std::string(name) + ".tmp." + std::to_string(::getpid())));
  train::save_corpus(train::make_korean_corpus(1, 100), data);
  CHECK(slurp(tmp.path / "victim.txt") == kVictim);
  CHECK(fs::is_regular_file(fs::symlink_status(data / "train.en")));  // not the link renamed into place
  CHECK(slurp(data / "train.en").find("\n") != std::string::npos);
}

TEST_CASE("train --out refuses a non-empty folder that holds no gradflow run, and changes nothing in it") {
  TempDir tmp("gf_outside");
  // A Hugging Face model's folder: a shard named like a checkpoint, and a config.json.
  tmp.write("hf/config.json", "{\"architectures\": [\"MarianMTModel\"], \"d_model\": 512}\n");
  save_safetensors(tmp.file("hf/model-00001-of-00002.safetensors"), {{"w", Tensor::zeros({4})}}, {{"format", "pt"}});
  const auto before = listing(tmp.path / "hf");
  const std::vector<std::string> tiny = {"--steps", "1", "--d-model", "32", "--heads", "2", "--ff", "64", "--layers", "1", "--samples", "0",
                                         "--quiet"};
  auto train_into = [&](const std::string& out, const std::string& tag) {
    std::vector<std::string> a{"train"};
    a.insert(a.end(), tiny.begin(), tiny.end());
    a.insert(a.end(), {"--out", out});
    return gradflow(a, tmp, tag);
  };
  const Ran r = train_into(tmp.file("hf"), "hf");
  INFO(r.out, r.err);
  CHECK(r.exit_code() == 2);
  CHECK(r.err.find("--out '" + tmp.file("hf") + "' is not empty and holds no gradflow run") != std::string::npos);
  CHECK(r.err.find("model-00001-of-00002.safetensors") != std::string::npos);
  CHECK(listing(tmp.path / "hf") == before);  // before the fix: the shard deleted, config.json replaced
  // An empty folder, and a gradflow run's folder (trained again only with --resume), are not refused for that.
  fs::create_directories(tmp.path / "empty");
  CHECK(train_into(tmp.file("empty"), "empty").exit_code() == 0);
  const Ran again = train_into(tmp.file("empty"), "again");
  CHECK(again.exit_code() == 2);
  CHECK(again.err.find("already holds a run; use --resume") != std::string::npos);
}

TEST_CASE("a save deletes only its own checkpoint files: the exact name pattern and gradflow's format metadata") {
  TempDir tmp("gf_outside");
  const std::string dir = tmp.path.string();
  const std::map<std::string, Tensor> w{{"w", Tensor::zeros({3})}};
  const std::map<std::string, std::string> gradflow_meta{{"format", "gradflow"}};
  save_safetensors(tmp.file("model-0000002.safetensors"), w, gradflow_meta);           // an old checkpoint of its own: goes
  save_safetensors(tmp.file("optim-0000002.safetensors"), w, gradflow_meta);           // likewise
  save_safetensors(tmp.file("model-0000001.safetensors"), w, {{"format", "pt"}});       // its name, another program's file: stays
  save_safetensors(tmp.file("model-00001-of-00002.safetensors"), w, gradflow_meta);    // not its exact pattern: stays
  tmp.write("optim-0000003.safetensors", "not a safetensors file at all");             // unreadable: stays
  train::RunState s;
  s.step = 5;
  train::save_checkpoint(dir, s, w, w, gradflow_meta);
  CHECK(s.model_file == "model-0000005.safetensors");
  CHECK_FALSE(fs::exists(tmp.path / "model-0000002.safetensors"));
  CHECK_FALSE(fs::exists(tmp.path / "optim-0000002.safetensors"));
  CHECK(fs::exists(tmp.path / "model-0000001.safetensors"));  // before the fix: every model-*/optim-*.safetensors went
  CHECK(fs::exists(tmp.path / "model-00001-of-00002.safetensors"));
  CHECK(fs::exists(tmp.path / "optim-0000003.safetensors"));
  CHECK(fs::exists(tmp.path / s.model_file));
}

TEST_CASE("a grad_stats.jsonl line missing a key the report reads is named by file, line and key") {
  TempDir tmp("gf_outside");
  const json good = {{"step", 1}, {"loss", 5.0}, {"lr", 1e-3},
                     {"groups", {{{"name", "emb"}, {"grad_norm", 1.0}, {"param_norm", 2.0}, {"update_ratio", 0.1}}}},
                     {"attention", {{{"name", "enc0.self"}, {"entropy", {0.5, 0.7}}, {"uniform", 1.0}}}}};
  json no_entropy = good;
  no_entropy["step"] = 2;
  no_entropy["attention"][0].erase("entropy");  // before the fix: const operator[] on a missing key, undefined behaviour
  tmp.write("a.jsonl", good.dump() + "\n" + no_entropy.dump() + "\n" + good.dump() + "\n");
  CHECK_THROWS_WITH_AS(app::grad_stats_data(tmp.file("a.jsonl"), 10),
                       doctest::Contains("a.jsonl line 2: not a grad-stats record: missing field 'attention[0].entropy'"), std::runtime_error);
  json bad_name = good;
  bad_name["groups"][0]["name"] = 7;
  tmp.write("b.jsonl", good.dump() + "\n" + bad_name.dump() + "\n");
  CHECK_THROWS_WITH_AS(app::grad_stats_data(tmp.file("b.jsonl"), 10), doctest::Contains("b.jsonl line 2: not a grad-stats record: 'groups[0].name' must be a string, got 7"),
                       std::runtime_error);
  // A number too large for a double is not JSON that nlohmann reads: that line is named too.
  std::string inf = good.dump();
  inf.replace(inf.find("\"loss\":5.0"), 10, "\"loss\":1e999");
  tmp.write("c.jsonl", good.dump() + "\n" + inf + "\n" + good.dump() + "\n");
  CHECK_THROWS_WITH_AS(app::grad_stats_data(tmp.file("c.jsonl"), 10), doctest::Contains("c.jsonl line 2: not a grad-stats record: "),
                       std::runtime_error);
}

TEST_CASE("a lab's JSON with a mistyped or missing key is named by file and key") {
  TempDir tmp("gf_outside");
  const fs::path lab = gf::test::write_toy_lab(tmp.path, false);
  json j = json::parse(slurp(lab / "toy.json"));
  j["title"] = 5;
  tmp.write("toy/toy.json", j.dump());
  CHECK_THROWS_WITH_AS(app::lab_page_data(lab.string()), doctest::Contains("toy.json: malformed lab output: 'title' must be a string, got 5"),
                       std::runtime_error);
  j["title"] = "ok";
  j["claims"][1].erase("id");
  tmp.write("toy/toy.json", j.dump());
  CHECK_THROWS_WITH_AS(app::lab_page_data(lab.string()), doctest::Contains("toy.json: malformed lab output: missing field 'claims[1].id'"),
                       std::runtime_error);
}

TEST_CASE("config.json, state.json and grad_stats.jsonl nested too deep are refused; state.json's steps and counts are capped") {
  TempDir tmp("gf_outside");
  std::string deep = "{\"x\": ";
  for (int i = 0; i < 20000; ++i) deep += "[";
  for (int i = 0; i < 20000; ++i) deep += "]";
  deep += "}";
  CHECK_THROWS_WITH_AS(train::RunConfig::from_json(deep, "config.json"), doctest::Contains("config.json: malformed run config: nested more than 16 levels"),
                       std::runtime_error);  // before the fix: read as the default config, the key ignored
  CHECK_THROWS_WITH_AS(train::state_from_json(deep, "state.json"), doctest::Contains("nested more than 16 levels"), std::runtime_error);
  tmp.write("g.jsonl", deep + "\n{\"step\": 1}\n");
  CHECK_THROWS_WITH_AS(app::grad_stats_data(tmp.file("g.jsonl"), 10), doctest::Contains("line 1: not a grad-stats record: nested more than 16 levels"),
                       std::runtime_error);
  // A step near INT64_MAX ran the report's schedule loop past the end of int64 (and until memory ran out).
  const fs::path run = trained(tmp);
  json state = json::parse(slurp(run / "state.json"));
  const json good = state;
  for (const char* key : {"step", "epoch", "batch_in_epoch", "skipped_long", "skipped_nonfinite"}) {
    CAPTURE(key);
    state = good;
    state[key] = 9223372036854775000LL;
    const std::string expected = "'" + std::string(key) + "' must be an integer from 0 to 10^15, got 9223372036854775000";
    CHECK_THROWS_WITH_AS(train::state_from_json(state.dump(), "state.json"), doctest::Contains(expected.c_str()), std::runtime_error);
  }
  state = good;
  state["train_curve"] = {{1e300, 5.0}};
  CHECK_THROWS_WITH_AS(train::state_from_json(state.dump(), "state.json"), doctest::Contains("'train_curve[0][0]' must be a step from 0 to 10^15"),
                       std::runtime_error);
  // The report on that folder: a clear error, at once.
  state = good;
  state["step"] = 9223372036854775000LL;
  tmp.write("run/state.json", state.dump());
  const Ran r = gradflow({"report", run.string(), "--out", tmp.file("r.html")}, tmp, "report", bounded());
  CHECK(r.exit_code() == 1);
  CHECK(r.err.find("state.json: malformed run state: 'step' must be an integer from 0 to 10^15") != std::string::npos);
  tmp.write("run/state.json", good.dump());
  tmp.write("run/config.json", deep);
  const Ran d = gradflow({"report", run.string(), "--out", tmp.file("d.html")}, tmp, "deep", bounded());
  CHECK(d.exit_code() == 1);  // before the fix: a page of hundreds of MB (the unknown key, indented at every level)
  CHECK(d.err.find("config.json: malformed run config: nested more than 16 levels") != std::string::npos);
  CHECK_FALSE(fs::exists(tmp.path / "d.html"));
}

TEST_CASE("--beam is bounded, and batch x beam rows are in the memory check") {
  TempDir tmp("gf_outside");
  const fs::path run = trained(tmp);
  tmp.write("in.txt", "i read a book .\n");
  const Ran huge = gradflow({"translate", "--model", run.string(), "--input", tmp.file("in.txt"), "--beam", "9223372036854775807"}, tmp, "huge");
  INFO(huge.out, huge.err);
  CHECK(huge.exit_code() == 2);  // before the fix: K + 1 overflowed, an empty line and exit 0
  CHECK(huge.err.find("--beam must be 1 to 256, got 9223372036854775807") != std::string::npos);
  CHECK(huge.out.empty());
  const Ran rows = gradflow({"translate", "--model", run.string(), "--input", tmp.file("in.txt"), "--beam", "200", "--batch-size", "100000000"},
                            tmp, "rows");
  INFO(rows.out, rows.err);
  CHECK(rows.exit_code() == 1);  // before the fix: not checked (here, with one line, it ran)
  CHECK(rows.err.find("--batch-size 100000000 x --beam 200 = 20000000000 rows decoded at once need") != std::string::npos);
  const Ran ok = gradflow({"translate", "--model", run.string(), "--input", tmp.file("in.txt"), "--beam", "4"}, tmp, "ok");
  CHECK(ok.exit_code() == 0);
}

TEST_CASE("a checkpoint with gradflow's format but no digest is refused by name; state.json's digest is compared wherever it names the weights") {
  TempDir tmp("gf_outside");
  const fs::path run = trained(tmp);
  tmp.write("in.txt", "i read a book .\n");
  const train::RunState state = train::load_state(run.string());
  // best.safetensors with its digest stripped (the key renamed) and a weight changed: it loaded unchecked.
  std::string best = slurp(run / "best.safetensors");
  const size_t key = best.find("gradflow.digest");
  REQUIRE(key != std::string::npos);
  best.replace(key, 15, "gradflow.digesT");
  best[best.size() - 1] ^= 0x40;
  tmp.write("run/best.safetensors", best);
  const Ran stripped = gradflow({"translate", "--model", run.string(), "--input", tmp.file("in.txt")}, tmp, "stripped");
  INFO(stripped.err);
  CHECK(stripped.exit_code() == 1);
  CHECK(stripped.err.find("best.safetensors': it carries gradflow's format metadata (\"format\": \"gradflow\") but no digest") != std::string::npos);
  // Without best.safetensors, Translator::load falls back to the checkpoint state.json names: another
  // complete checkpoint put in its place (its own digest intact) is caught by state.json's copy.
  fs::remove(run / "best.safetensors");
  rewrite_weights(run / state.model_file, [](auto& t) { t.at("out.bias").template data<float>()[0] += 1.0f; });
  for (const std::string& model : {run.string(), (run / state.model_file).string()}) {
    CAPTURE(model);
    const Ran swapped = gradflow({"translate", "--model", model, "--input", tmp.file("in.txt")}, tmp, "swapped");
    INFO(swapped.err);
    CHECK(swapped.exit_code() == 1);  // before the fix: translated with the swapped weights
    CHECK(swapped.err.find(state.model_file + "': its digest is xxh3-64:") != std::string::npos);
    CHECK(swapped.err.find("but the run state recorded " + state.model_digest) != std::string::npos);
  }
}

TEST_CASE("translate never writes a line break inside an output line: a byte piece <0x0A> becomes a space") {
  TempDir tmp("gf_outside");
  const Ran t = gradflow({"train", "--subwords", "600", "--steps", "1", "--d-model", "32", "--heads", "2", "--ff", "64", "--layers", "1",
                          "--samples", "0", "--quiet", "--out", tmp.file("sw")},
                         tmp, "train");
  REQUIRE(t.exit_code() == 0);
  // The model made to say the newline's byte piece at every step.
  const train::Vocab tgt = train::Vocab::load(tmp.path / "sw" / "vocab.tgt.txt");
  const int64_t newline = tgt.id("<0x0A>");
  REQUIRE(newline != train::Vocab::kUnk);
  rewrite_weights(tmp.path / "sw" / "best.safetensors", [&](auto& w) { w.at("out.bias").template data<float>()[newline] = 100.0f; });
  tmp.write("in.txt", "i read a book .\nyou go home .\n");
  const Ran r = gradflow({"translate", "--model", tmp.file("sw"), "--input", tmp.file("in.txt")}, tmp, "translate");
  INFO(r.err);
  REQUIRE(r.exit_code() == 0);
  CHECK(std::count(r.out.begin(), r.out.end(), '\n') == 2);  // one line out per line in; before the fix, dozens
  CHECK(r.out.find('\r') == std::string::npos);
}

TEST_CASE("report names every file it read from outside the run folder, in its output and on the page, and reads only regular files") {
  TempDir tmp("gf_outside");
  const fs::path data = tmp.path / "data";
  train::save_corpus(train::make_korean_corpus(1, 600), data);
  train::RunConfig c = gf::test::tiny_run(600);
  c.data = data.string();
  c.steps = 4;
  const train::TrainOptions o = gf::test::quiet_options(tmp.file("run"));
  train::train_translator(c, o);
  const Ran r = gradflow({"report", o.out, "--sentences", "1"}, tmp, "report");
  INFO(r.err);
  REQUIRE(r.exit_code() == 0);
  const std::string test_en = fs::canonical(data / "test.en").string();
  CHECK(r.out.find("report: read from outside the run folder: " + test_en + " (a data file the run's config.json names") != std::string::npos);
  const std::string page = slurp(fs::path(o.out) / "report.html");
  const size_t at = page.find("<script type=\"application/json\" id=\"report-data\">");
  REQUIRE(at != std::string::npos);
  const json d = json::parse(page.substr(page.find('\n', at) + 1, page.find("</script>", at) - page.find('\n', at) - 1));
  bool listed = false;
  for (const json& f : d.value("outside_files", json::array())) listed = listed || f.value("path", "") == test_en;
  CHECK(listed);
  // A link in the folder to a file elsewhere is named too.
  tmp.write("elsewhere/vocab.txt", slurp(fs::path(o.out) / "vocab.src.txt"));
  fs::remove(fs::path(o.out) / "vocab.src.txt");
  fs::create_symlink(tmp.path / "elsewhere" / "vocab.txt", fs::path(o.out) / "vocab.src.txt");
  const Ran linked = gradflow({"report", o.out, "--sentences", "1"}, tmp, "linked");
  CHECK(linked.exit_code() == 0);
  CHECK(linked.out.find("read from outside the run folder: " + fs::canonical(tmp.path / "elsewhere" / "vocab.txt").string() +
                        " (the run folder's vocab.src.txt is a link to it)") != std::string::npos);
  // A data file that is a FIFO: not opened (it would wait for a writer forever); the page says why.
  fs::remove(data / "test.en");
  REQUIRE(::mkfifo((data / "test.en").c_str(), 0600) == 0);
  const Ran fifo = gradflow({"report", o.out, "--sentences", "1"}, tmp, "fifo");
  INFO(fifo.err);
  CHECK(fifo.exit_code() == 0);  // before the fix: it hung on the FIFO (and was killed after 120 s)
  CHECK(slurp(fs::path(o.out) / "report.html").find("is a FIFO, not a regular file") != std::string::npos);
  // --input as a FIFO: refused by name.
  REQUIRE(::mkfifo(tmp.file("in.fifo").c_str(), 0600) == 0);
  const Ran in = gradflow({"report", o.out, "--input", tmp.file("in.fifo")}, tmp, "input");
  CHECK(in.exit_code() == 2);
  CHECK(in.err.find("in.fifo' is a FIFO, not a regular file") != std::string::npos);
}

TEST_CASE("every file read from a run folder has a size bound: a link to /dev/zero or a huge file is refused by name") {
  TempDir tmp("gf_outside");
  const fs::path good = trained(tmp, "good");
  tmp.write("in.txt", "i read a book .\n");
  struct Case {
    const char* file;
    const char* command;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"config.json", "translate", "config.json' is a character device, not a regular file"},
      {"vocab.src.txt", "translate", "vocab.src.txt' is a character device, not a regular file"},
      {"config.json", "report", "config.json' is a character device, not a regular file"},
      {"state.json", "report", "state.json' is a character device, not a regular file"},
      {"grad_stats.jsonl", "report", "grad_stats.jsonl' is a character device, not a regular file"},
  };
  for (const Case& k : cases) {
    CAPTURE(k.file);
    CAPTURE(k.command);
    const fs::path run = tmp.path / "zero";
    fs::remove_all(run);
    fs::copy(good, run, fs::copy_options::recursive);
    fs::remove(run / k.file);
    fs::create_symlink("/dev/zero", run / k.file);
    const Ran r = std::string(k.command) == "translate"
                      ? gradflow({"translate", "--model", run.string(), "--input", tmp.file("in.txt")}, tmp, "zero", bounded())
                      : gradflow({"report", run.string(), "--out", tmp.file("z.html")}, tmp, "zero", bounded());
    INFO(r.err);
    CHECK(r.exit_code() == 1);  // before the fix: reading until memory ran out
    CHECK(r.err.find(k.expected) != std::string::npos);
  }
  // A sparse 2 GiB vocabulary: refused from its size, before any of it is read.
  const fs::path run = tmp.path / "big";
  fs::copy(good, run, fs::copy_options::recursive);
  fs::resize_file(run / "vocab.tgt.txt", 2LL << 30);
  const Ran big = gradflow({"translate", "--model", run.string(), "--input", tmp.file("in.txt")}, tmp, "big", bounded());
  INFO(big.err);
  CHECK(big.exit_code() == 1);
  CHECK(big.err.find("vocab.tgt.txt' holds 2147483648 bytes, more than the 67108864 read from such a file") != std::string::npos);
  // Weights whose header claims 2^33 values (32 GiB, sparse on disk): refused from the header, before
  // any of it is allocated, by translate (the model's size bounds the file) and by --resume.
  auto sparse_weights = [](const fs::path& file) {
    const uint64_t n = uint64_t{1} << 33;
    std::string header = fmt::format(R"({{"huge":{{"dtype":"F32","shape":[{}],"data_offsets":[0,{}]}}}})", n, 4 * n);
    header += std::string((8 - header.size() % 8) % 8, ' ');
    const uint64_t length = header.size();
    std::string bytes(reinterpret_cast<const char*>(&length), 8);
    std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes << header;
    fs::resize_file(file, 8 + length + 4 * n);
  };
  const fs::path huge = tmp.path / "huge";
  fs::copy(good, huge, fs::copy_options::recursive);
  sparse_weights(huge / "best.safetensors");
  const Ran t = gradflow({"translate", "--model", huge.string(), "--input", tmp.file("in.txt")}, tmp, "huge", bounded());
  INFO(t.err);
  CHECK(t.exit_code() == 1);  // before the fix: std::bad_alloc (or the memory exhausted)
  CHECK(t.err.find("best.safetensors' does not fit the model of") != std::string::npos);
  CHECK(t.err.find("it holds 8589934592 values") != std::string::npos);
  const train::RunState state = train::load_state(huge.string());
  sparse_weights(huge / state.model_file);
  const Ran r = gradflow({"train", "--resume", huge.string(), "--steps", "6", "--quiet"}, tmp, "huge-resume", bounded());
  INFO(r.err);
  CHECK(r.exit_code() == 1);
  CHECK(r.err.find(state.model_file + "': 343597") != std::string::npos);  // 2^35 bytes and the header
  CHECK(r.err.find("more than a checkpoint of this model can hold") != std::string::npos);
}

TEST_CASE("a lab page takes only a valid lab name; its links are path segments the page encodes") {
  TempDir tmp("gf_outside");
  fs::create_directories(tmp.path / "elsewhere");
  const fs::path lab = gf::test::write_toy_lab(tmp.path / "labs", false);
  json j = json::parse(slurp(lab / "toy.json"));
  for (const std::string& name : {std::string("../../elsewhere/page"), tmp.file("elsewhere/page"), std::string("")}) {
    CAPTURE(name);
    j["lab"] = name;
    tmp.write("labs/toy/toy.json", j.dump());
    const Ran r = gradflow({"report", lab.string()}, tmp, "report");
    INFO(r.out, r.err);
    CHECK(r.exit_code() == 1);  // before the fix: the page written at NAME.html, outside the folder
    CHECK(r.err.find("toy.json: malformed lab output: 'lab' must be a lab's name") != std::string::npos);
    CHECK_FALSE(fs::exists(tmp.path / "elsewhere" / "page.html"));
  }
  // A lab folder named like a URL scheme: the index's link is the folder's name as one segment.
  j["lab"] = "toy";
  const fs::path parent = tmp.path / "labs2";
  tmp.write("labs2/javascript:alert(1)/toy.json", j.dump());
  const std::string index = app::write_lab_index(parent.string());
  const std::string page = slurp(index);
  CHECK(page.find("\"page\": [\"javascript:alert(1)\",\"toy.html\"]") != std::string::npos);  // before: "javascript:alert(1)/toy.html"
  CHECK(app::asset("common.js").find("encodeURIComponent") != std::string::npos);
}
