// Bad input, tried on purpose: a table of wrong flags, data files, checkpoints and C++ API calls.
// Each must end with a clear message naming what and where (checked by a fragment of it) and a
// non-zero exit: 2 for a usage error, 1 for bad data or files. Nothing may crash (no signal, no
// "terminate called"), hang, or change a run folder that already holds good output.
// docs/errors.md lists the same table with the full messages.
#include <doctest/doctest.h>

#include <cctype>
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "app/commands.h"
#include "autograd/ops/cross_entropy.h"
#include "temp_dir.h"
#include "autograd/ops/matmul.h"
#include "nn/multihead_attention.h"
#include "tensor/io/safetensors.h"
#include "train/loop/trainer.h"
#include <nlohmann/json.hpp>

#include "tiny_run.h"

using namespace gf;
namespace fs = std::filesystem;

namespace {

// The scratch folder the table runs in, with its files.
struct Scratch : gf::test::TempDir {
  Scratch() : TempDir("gf_test_bad_inputs") {}
};

std::string slurp(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

struct Outcome {
  int exit_code = -1;  // -1: killed by a signal
  std::string out;     // stdout, then stderr
  size_t stdout_lines = 0;
};

// Runs build/gradflow ARGS in `cwd` with stdin from /dev/null and a 120 s limit (a hang fails).
Outcome gradflow(const fs::path& cwd, const std::string& args) {
  const fs::path err = cwd / ".gradflow.err";
  const std::string cmd = "cd '" + cwd.string() + "' && timeout 120 " + std::string(GRADFLOW_BINARY_DIR) + "/gradflow " + args +
                          " < /dev/null 2> '" + err.string() + "'";
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  Outcome r;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) r.out.append(buf, n);
  const int st = pclose(p);
  r.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  r.stdout_lines = static_cast<size_t>(std::count(r.out.begin(), r.out.end(), '\n'));
  r.out += slurp(err);
  return r;
}

// A small trained run folder (whitespace tokens, the built-in corpus) to break copies of.
fs::path trained_run(const Scratch& s) {
  train::RunConfig c = gf::test::tiny_run(600);
  c.steps = 4;
  const train::TrainOptions o = gf::test::quiet_options((s.path / "good").string());
  train::train_translator(c, o);
  return o.out;
}

// A copy of the run whose best.safetensors is changed by `edit`.
std::string broken_copy(const Scratch& s, const std::string& name, const std::function<void(std::map<std::string, Tensor>&)>& edit) {
  const fs::path to = s.path / name;
  fs::copy(s.path / "good", to, fs::copy_options::recursive);
  SafetensorsFile f = load_safetensors((to / "best.safetensors").string());
  edit(f.tensors);
  save_safetensors((to / "best.safetensors").string(), f.tensors, f.metadata);
  return name;
}

// The output line holding `fragment` (the whole message, for docs/errors.md), with | escaped.
std::string message_line(const std::string& out, const std::string& fragment) {
  const size_t at = out.find(fragment);
  if (at == std::string::npos) return "(not found)";
  const size_t begin = out.rfind('\n', at) == std::string::npos ? 0 : out.rfind('\n', at) + 1;
  std::string line = out.substr(begin, out.find('\n', at) - begin);
  for (size_t i = 0; (i = line.find('|', i)) != std::string::npos; i += 2) line.replace(i, 1, "\\|");
  return line;
}

// The line as docs/errors.md shows it: a weights digest (xxh3-64: and 16 hex digits) depends on the
// machine's summation order, so the page writes <digest> in its place.
std::string doc_line(std::string line) {
  const std::string tag = "xxh3-64:";
  for (size_t i = 0; (i = line.find(tag, i)) != std::string::npos;) {
    i += tag.size();
    size_t n = 0;
    while (i + n < line.size() && std::isxdigit(static_cast<unsigned char>(line[i + n]))) ++n;
    line.replace(i, n, "<digest>");
  }
  return line;
}

const std::string kNorm = "transformer.decoder.norm.bias";

// The error for a safetensors file of `bytes` cut to `size` bytes, shown as `name`: the first
// tensor in the header's (sorted) order whose data_offsets run past the shortened data section.
std::string truncation_error(const std::string& bytes, size_t size, const std::string& name) {
  uint64_t header = 0;
  std::memcpy(&header, bytes.data(), sizeof header);
  const nlohmann::json h = nlohmann::json::parse(bytes.substr(sizeof header, header));
  const uint64_t data = size - sizeof header - header;
  for (const auto& [tensor, v] : h.items()) {
    if (tensor == "__metadata__") continue;
    const uint64_t begin = v["data_offsets"][0], end = v["data_offsets"][1];
    if (end > data)
      return fmt::format("safetensors: '{}': tensor '{}': data_offsets [{}, {}] run past the end of the data section ({} bytes)", name, tensor,
                         begin, end, data);
  }
  FAIL("a checkpoint cut to ", size, " bytes still holds every tensor");
  return "";
}

const char* const kErrorsIntro = R"(# Errors: bad input, tried on purpose

Every row below is what the command printed when `tests/test_bad_inputs.cpp` ran it on
purpose-made bad input. CI runs that test and checks, for each row, a fragment of the message, the
exit code (2: a usage error, fix the command; 1: bad data or files), that the message is one line
starting with the command (`gradflow train: ...`) and naming the flag, value or file (with its line)
at fault, that nothing crashed or hung, that a refused run left no checkpoint in its `--out`, and
that the good run folder the table breaks copies of is left unchanged (its checkpoint and state
byte for byte). The file is that test's own output; regenerate it with

    GRADFLOW_ERRORS_MD=docs/errors.md ./build/tests/test_bad_inputs

"good" is a small run folder the test trains; "missing", "extra", "misshaped", "wrongdtype",
"truncated", "vocab", "badconfig", "badstate" and "bigconfig" (d_model 100000 in its config.json)
are copies of it with one thing broken. A folder a command is pointed at is outside input, as a
data file is: "foreign" (another program's model folder), "locklink" (its lock file a link to
another file), "zeroconfig" (config.json a link to /dev/zero), "bigvocab" (a sparse 2 GiB
vocabulary), "deepconfig", "hugestep", "stripped" (best.safetensors with its digest removed),
"swapped" (no best.safetensors, and other weights in the checkpoint state.json names) and "badlab"
(a lab's output naming a page outside its folder) are folders made as someone else could make
them; `tests/test_outside_folders.cpp` tries more. Sizes are checked before anything of that size is
allocated: a model's weights, gradients, Adam state and activations are estimated from its shapes
(`train/run/memory_estimate.h`) against the memory available or `--max-memory`, and a checkpoint's
header against its config.json. A float64
checkpoint loads into a float32 model (converted, as PyTorch's `load_state_dict` does); integer
weights do not. A line longer than the model's `--max-len` is not an error for `translate`: its
head is translated and a warning names the line (tested separately). A line longer than
`--max-line-bytes` (default 1 MiB) is, naming file and line; `translate --skip-bad-lines` writes an
empty output line for it, or for a line that is not UTF-8, and goes on
(`tests/test_translate_stream.cpp`). Subword runs' own errors
(a missing or mismatched SentencePiece model, a `--subwords` size the text cannot fill) are in
`tests/test_subwords.cpp`.

| bad input | command (in a scratch folder) | exit | message |
| --- | --- | --- | --- |
)";

struct BadInput {
  std::string what;     // the bad input, as docs/errors.md names it
  std::string args;     // gradflow arguments, run in the scratch folder
  int exit_code;        // 2 usage, 1 data or file
  std::string message;  // a fragment of the message that must appear
  std::string names;    // what the message must name: the flag, value, file or file:line at fault
  int stdout_lines = 0; // translate's output lines: those before the bad input line (none for the others)
};

// The command a row runs ("train", "translate", ...), or "" for a global flag or an unknown command.
std::string command_of(const std::string& args) {
  const std::string first = args.substr(0, args.find(' '));
  for (const app::Command& c : app::commands())
    if (first == c.name) return first;
  return "";
}

// The folder a row's --out or --resume names, or "".
std::string run_folder_of(const std::string& args) {
  for (const char* flag : {"--out ", "--resume "})
    if (const size_t at = args.find(flag); at != std::string::npos) {
      const size_t begin = at + std::string(flag).size();
      return args.substr(begin, args.find(' ', begin) - begin);
    }
  return "";
}

// Data files for the table, written once into the scratch folder.
void write_fixtures(const Scratch& s) {
  s.write("empty/train.de", "");
  s.write("empty/train.en", "");
  s.write("empty/val.de", "a b\n");
  s.write("empty/val.en", "c d\n");
  s.write("emptysrc/train.de", "\n  \n");
  s.write("emptysrc/train.en", "x\ny\n");
  s.write("emptysrc/val.de", "a\n");
  s.write("emptysrc/val.en", "b\n");
  s.write("lines/train.de", "a\nb\n");
  s.write("lines/train.en", "c\n");
  s.write("utf/train.de", "a b\n\xff\xfe c\n");
  s.write("utf/train.en", "c\nd\n");
  std::string garbage;
  for (int i = 0; i < 2000; ++i) garbage += static_cast<char>((i * 7919 + 13) % 256);
  s.write("bin/train.de", garbage);
  s.write("bin/train.en", "x\n");
  s.write("noval/train.de", "a\n");
  s.write("noval/train.en", "b\n");
  s.write("notab.tsv", "a b\n");
  s.write("twotabs.tsv", "a\tb\tc\n");
  s.write("afile", "not a folder\n");
  s.write("bad_utf8.txt", "hello \xc3\x28 world\n");
  s.write("long_line.txt", "i read a book .\n" + std::string(300, 'a') + "\ni read a book .\n");
  s.write("longline/train.de", "a b\n" + std::string(300, 'a') + "\n");
  s.write("longline/train.en", "c d\ne f\n");
  s.write("longline/val.de", "a\n");
  s.write("longline/val.en", "b\n");
  s.write("hyp.txt", "a b\nc d\n");
  s.write("ref3.txt", "a b\nc d\ne f\n");
}

}  // namespace

TEST_CASE("bad inputs: each a clear one-line message naming what and where, the right exit code, and no trace left") {
  Scratch s;
  write_fixtures(s);
  const fs::path good = trained_run(s);
  const std::string good_best = slurp(good / "best.safetensors"), good_state = slurp(good / "state.json");
  broken_copy(s, "missing", [](auto& t) { t.erase(kNorm); });
  broken_copy(s, "extra", [](auto& t) { t["extra.weight"] = t.at(kNorm); });
  broken_copy(s, "misshaped", [](auto& t) { t[kNorm] = Tensor::zeros({t.at(kNorm).size(0) / 2}); });
  broken_copy(s, "wrongdtype", [](auto& t) { t[kNorm] = Tensor::zeros({t.at(kNorm).size(0)}, DType::Int64); });
  fs::copy(good, s.path / "truncated", fs::copy_options::recursive);
  s.write("truncated/best.safetensors", good_best.substr(0, good_best.size() / 2));
  fs::copy(good, s.path / "vocab", fs::copy_options::recursive);
  s.write("vocab/vocab.tgt.txt", "<pad>\n<unk>\n<bos>\n<eos>\nx\n");
  fs::copy(good, s.path / "badconfig", fs::copy_options::recursive);
  s.write("badconfig/config.json", "{ \"d_model\": ");
  fs::copy(good, s.path / "badstate", fs::copy_options::recursive);
  s.write("badstate/state.json", "{\"step\": 3}");
  fs::copy(good, s.path / "bigconfig", fs::copy_options::recursive);
  nlohmann::json big = nlohmann::json::parse(slurp(s.path / "bigconfig" / "config.json"));
  big["layer"]["d_model"] = 100000;
  big["layer"]["nhead"] = 2;
  s.write("bigconfig/config.json", big.dump(1));
  s.write("in.txt", "i read a book .\n");
  // Folders someone else made (issue 50): each is outside input.
  s.write("foreign/config.json", "{\"architectures\": [\"MarianMTModel\"]}\n");
  save_safetensors((s.path / "foreign" / "model-00001-of-00002.safetensors").string(), {{"w", Tensor::zeros({2})}}, {{"format", "pt"}});
  fs::copy(good, s.path / "locklink", fs::copy_options::recursive);
  fs::remove(s.path / "locklink" / ".gradflow.lock");  // (the run left its own)
  fs::create_symlink("../afile", s.path / "locklink" / ".gradflow.lock");
  fs::copy(good, s.path / "zeroconfig", fs::copy_options::recursive);
  fs::remove(s.path / "zeroconfig" / "config.json");
  fs::create_symlink("/dev/zero", s.path / "zeroconfig" / "config.json");
  fs::copy(good, s.path / "bigvocab", fs::copy_options::recursive);
  fs::resize_file(s.path / "bigvocab" / "vocab.tgt.txt", 2LL << 30);  // sparse
  fs::copy(good, s.path / "deepconfig", fs::copy_options::recursive);
  s.write("deepconfig/config.json", "{\"x\": " + std::string(20000, '[') + std::string(20000, ']') + "}");
  fs::copy(good, s.path / "hugestep", fs::copy_options::recursive);
  {
    nlohmann::json st = nlohmann::json::parse(good_state);
    st["step"] = 9223372036854775000LL;
    s.write("hugestep/state.json", st.dump(1));
  }
  fs::copy(good, s.path / "stripped", fs::copy_options::recursive);
  {
    std::string bytes = good_best;
    bytes.replace(bytes.find("gradflow.digest"), 15, "gradflow.digesT");
    s.write("stripped/best.safetensors", bytes);
  }
  fs::copy(good, s.path / "swapped", fs::copy_options::recursive);
  fs::remove(s.path / "swapped" / "best.safetensors");
  {  // another complete checkpoint (its own digest intact) in place of the one state.json recorded
    SafetensorsFile f = load_safetensors((good / "best.safetensors").string());
    f.tensors.at(kNorm).data<float>()[0] += 1.0f;
    save_safetensors((s.path / "swapped" / "model-0000004.safetensors").string(), f.tensors, f.metadata);
  }
  s.write("badlab/badlab.json", "{\"lab\": \"../escape\", \"claims\": [], \"settings\": {}}\n");

  const std::vector<BadInput> table = {
      // ---- command line
      {"--beam 0", "translate --model good --beam 0", 2, "--beam must be 1 to 256, got 0", "--beam"},
      {"a negative --beam", "translate --model good --beam -3", 2, "--beam must be 1 to 256, got -3", "--beam"},
      {"an unknown --beam-stop", "translate --model good --beam 2 --beam-stop never", 2, "--beam-stop must be heuristic or exact, got 'never'", "--beam-stop"},
      {"--batch-size 0", "translate --model good --batch-size 0", 2, "--batch-size must be at least 1", "--batch-size"},
      {"a negative learning rate", "train --lr -1", 2, "--lr must be positive, got -1", "--lr"},
      {"a learning rate that is not a number", "train --lr fast", 2, "--lr expects a number, got 'fast'", "'fast'"},
      {"--max-tokens 0", "train --max-tokens 0", 2, "--max-tokens must be positive", "--max-tokens"},
      {"dropout above 1", "train --dropout 1.5", 2, "dropout must be in [0, 1), got 1.5", "1.5"},
      {"a width the heads do not divide", "train --d-model 30 --heads 4", 2, "d_model 30 is not divisible by nhead 4", "d_model 30"},
      {"kv heads that do not divide the heads", "train --kv-heads 3", 2, "kv_heads must divide nhead 4", "kv_heads"},
      {"an integer flag given a word", "train --epochs two", 2, "--epochs expects an integer, got 'two'", "--epochs"},
      {"a negative time budget", "train --minutes -5", 2, "cannot be negative", "--minutes"},
      {"an absurd --max-len", "train --max-len 100000", 2, "--max-len must be at most 510", "--max-len"},
      {"label smoothing of 1", "train --label-smoothing 1", 2, "--label-smoothing must be in [0, 1)", "--label-smoothing"},
      {"--warmup -1", "train --warmup -1", 2, "--warmup cannot be negative", "--warmup"},
      {"--log-every 0", "train --log-every 0", 2, "--log-every must be at least 1, got 0", "--log-every"},  // was a SIGFPE in the trainer
      {"an unknown schedule", "train --schedule cosine", 2, "--schedule must be one of inverse-sqrt, wsd, constant, got 'cosine'", "--schedule"},
      {"--decay-fraction 0", "train --schedule wsd --decay-fraction 0", 2, "--decay-fraction must be in (0, 1], got 0", "--decay-fraction"},
      {"a negative --patience", "train --patience -2", 2, "--patience cannot be negative, got -2", "--patience"},
      {"a negative --subwords", "train --subwords -1", 2, "--subwords cannot be negative", "--subwords"},
      {"an unknown subword model type", "train --subwords 100 --subword-type word", 2, "--subword-type must be unigram or bpe", "--subword-type"},
      {"an unknown flag", "train --frobnicate", 2, "unknown flag --frobnicate", "--frobnicate"},
      {"an unknown command", "frobnicate", 2, "unknown command 'frobnicate'", "'frobnicate'"},
      {"an output folder that is a file", "train --out afile", 2, "--out 'afile' is a file, not a folder", "'afile'"},
      {"an output folder that holds a run", "train --out good", 2, "'good' already holds a run; use --resume good", "'good'"},
      {"--resume of a file", "train --resume afile", 2, "--resume 'afile' is not a run folder", "'afile'"},
      {"a --beam over 256", "translate --model good --beam 9223372036854775807", 2, "--beam must be 1 to 256, got 9223372036854775807", "--beam"},
      {"an output folder of another program's files", "train --out foreign", 2,
       "--out 'foreign' is not empty and holds no gradflow run (it has config.json, model-00001-of-00002.safetensors", "'foreign'"},
      {"an unknown BLEU tokeniser", "eval --model good --tokenize intl", 2, "--tokenize must be 13a or none, got 'intl'", "--tokenize"},
      {"average without kept epochs", "average --model good", 2, "keeps no epoch-NNNN.safetensors", "'good'"},
      // ---- data files
      {"an empty corpus", "train --data empty --out r1", 1, "the training split (empty/train.de) is empty", "empty/train.de"},
      {"a source side with only empty lines", "train --data emptysrc --out r2", 1, "2 pairs with an empty side were skipped", "emptysrc/train.de"},
      {"files of different line counts", "train --data lines --out r3", 1, "'lines/train.de' has 2 lines but 'lines/train.en' has 1 lines", "'lines/train.de'"},
      {"invalid UTF-8", "train --data utf --out r4", 1, "utf/train.de:2: invalid UTF-8 at byte 1 (0xff)", "utf/train.de:2"},
      {"binary garbage as text", "train --data bin --out r5", 1, "bin/train.de:1: invalid UTF-8", "bin/train.de:1"},
      {"a TSV line without a tab", "train --data notab.tsv --out r6", 1, "notab.tsv:1: no tab between source and target", "notab.tsv:1"},
      {"a TSV line with two tabs", "train --data twotabs.tsv --out r7", 1, "twotabs.tsv:1: more than one tab", "twotabs.tsv:1"},
      {"a data folder that does not exist", "train --data nowhere --out r8", 1, "--data 'nowhere' does not exist", "'nowhere'"},
      {"a data folder without a validation split", "train --data noval --out r9", 1, "has no validation split", "'noval'"},
      {"invalid UTF-8 to translate", "translate --model good --input bad_utf8.txt", 1, "bad_utf8.txt:1: invalid UTF-8 at byte 7 (0xc3)", "bad_utf8.txt:1"},
      {"a line over --max-line-bytes to translate", "translate --model good --input long_line.txt --max-line-bytes 200", 1,
       "long_line.txt:2: line is longer than 200 bytes (the limit; --max-line-bytes raises it)", "long_line.txt:2", 1},
      {"a line over --max-line-bytes to train on", "train --data longline --max-line-bytes 200 --out r12", 1,
       "longline/train.de:2: line is longer than 200 bytes", "longline/train.de:2"},
      {"a line over --max-line-bytes to benchmark on", "bench train --data longline --max-line-bytes 200 --steps 1", 1,
       "longline/train.de:2: line is longer than 200 bytes", "longline/train.de:2"},
      {"--max-line-bytes 0", "translate --model good --max-line-bytes 0", 2, "--max-line-bytes must be at least 1, got 0", "--max-line-bytes"},
      {"BLEU of files with different line counts", "bleu hyp.txt ref3.txt", 1, "hyp.txt has 2 lines but ref3.txt has 3", "hyp.txt"},
      // ---- checkpoints and run folders
      {"a model that does not exist", "translate --model nowhere", 1, "--model 'nowhere' does not exist", "'nowhere'"},
      {"a checkpoint missing a tensor", "translate --model missing", 1, "missing key '" + kNorm + "'", "missing/best.safetensors"},
      {"a checkpoint with an extra tensor", "translate --model extra", 1, "unexpected key 'extra.weight'", "extra/best.safetensors"},
      {"a mis-shaped tensor", "translate --model misshaped", 1, "'" + kNorm + "' has shape (16,) in the checkpoint but (32,) in the model", "misshaped/best.safetensors"},
      {"a tensor of the wrong dtype", "translate --model wrongdtype", 1, "'" + kNorm + "' is int64 in the checkpoint but float32 in the model", "wrongdtype/best.safetensors"},
      {"a truncated checkpoint", "translate --model truncated", 1, truncation_error(good_best, good_best.size() / 2, "truncated/best.safetensors"),
       "truncated/best.safetensors"},
      {"a vocabulary that does not match the checkpoint", "translate --model vocab", 1, "vocab/best.safetensors' does not fit the model", "vocab/best.safetensors"},
      {"a malformed config.json", "translate --model badconfig", 1, "badconfig/config.json: malformed run config", "badconfig/config.json"},
      {"a malformed state.json", "train --resume badstate --steps 1", 1, "badstate/state.json: malformed run state", "badstate/state.json"},
      // ---- folders made by someone else
      {"a lock file that is a symbolic link", "train --resume locklink --steps 1", 1, "is a symbolic link; gradflow writes its own files there only",
       "locklink/.gradflow.lock'"},
      {"a config.json that is a link to /dev/zero", "translate --model zeroconfig --input in.txt", 1, "is a character device, not a regular file",
       "zeroconfig/config.json'"},
      {"a vocabulary of 2 GiB", "translate --model bigvocab --input in.txt", 1, "holds 2147483648 bytes, more than the 67108864 read from such a file",
       "bigvocab/vocab.tgt.txt'"},
      {"a config.json nested 20,000 levels deep", "report deepconfig", 1, "malformed run config: nested more than 16 levels deep",
       "deepconfig/config.json"},
      {"a state.json step near 2^63", "report hugestep", 1, "'step' must be an integer from 0 to 10^15", "hugestep/state.json"},
      {"a checkpoint whose digest was removed", "translate --model stripped --input in.txt", 1,
       "it carries gradflow's format metadata (\"format\": \"gradflow\") but no digest", "stripped/best.safetensors'"},
      {"a checkpoint that is not the one state.json recorded", "translate --model swapped --input in.txt", 1, "but the run state recorded xxh3-64:",
       "swapped/model-0000004.safetensors'"},
      {"a lab's name that leaves its folder", "report badlab", 1, "malformed lab output: 'lab' must be a lab's name", "badlab/badlab.json"},
      // ---- sizes: refused before anything of that size is allocated
      {"a model too large for the memory", "train --d-model 200000 --out r10", 1, "the model needs", "--d-model 200000"},
      {"a model over --max-memory", "train --max-memory 1M --out r11", 1, "--max-memory allows 1.0 MiB", "--max-memory"},
      {"a malformed --max-memory", "train --max-memory lots", 2, "a memory size must be a positive number", "'lots'"},
      {"a config.json far larger than its checkpoint", "translate --model bigconfig --input in.txt", 1, "and that config (d_model 100000",
       "bigconfig/config.json"},
      {"--batch-size x --beam over the memory", "translate --model good --input in.txt --batch-size 100000000 --beam 200", 1,
       "rows decoded at once need", "--batch-size 100000000 x --beam 200"},
      {"--threads that is not a number", "--threads 3x train", 2, "--threads expects a positive integer, got '3x'", "'3x'"},
      // ---- stdin
      {"translate with nothing on stdin", "translate --model good", 2, "no input on stdin (it was empty)", "stdin"},
  };
  std::string doc;  // docs/errors.md's table, from these very runs
  for (const BadInput& b : table) {
    CAPTURE(b.what);
    CAPTURE(b.args);
    const std::string folder = run_folder_of(b.args);
    const std::string state_before = folder.empty() ? "" : slurp(s.path / folder / "state.json");
    const Outcome r = gradflow(s.path, b.args);
    CAPTURE(r.out);
    CHECK(r.exit_code == b.exit_code);
    const std::string line = message_line(r.out, b.message);
    CHECK(r.out.find(b.message) != std::string::npos);
    // One line says it all: the program and command first, then what and where.
    const std::string command = command_of(b.args);
    CHECK(line.starts_with(command.empty() ? "gradflow:" : "gradflow " + command + ":"));
    CHECK(line.find(b.names) != std::string::npos);
    CHECK(r.out.find("terminate called") == std::string::npos);
    CHECK(r.out.find("Segmentation") == std::string::npos);
    if (command == "translate") CHECK(r.stdout_lines == static_cast<size_t>(b.stdout_lines));
    // A refused run leaves no checkpoint behind: none in a new --out, the same one in a --resume.
    if (!folder.empty()) CHECK(slurp(s.path / folder / "state.json") == state_before);
    doc += "| " + b.what + " | `gradflow " + b.args + "` | " + std::to_string(r.exit_code) + " | `` " + doc_line(line) + " `` |\n";
  }
  // GRADFLOW_ERRORS_MD=docs/errors.md ./build/tests/test_bad_inputs rewrites docs/errors.md from these runs.
  if (const char* md = std::getenv("GRADFLOW_ERRORS_MD")) std::ofstream(md) << kErrorsIntro << doc;
  // Nothing above touched the good run, the one refused for --out included.
  CHECK(slurp(good / "best.safetensors") == good_best);
  CHECK(slurp(good / "state.json") == good_state);
}

TEST_CASE("a 10,000-token line is translated from its head, with a warning naming the line") {
  Scratch s;
  const fs::path good = trained_run(s);
  std::string long_line;
  for (int i = 0; i < 10000; ++i) long_line += "the ";
  s.write("in.txt", "i read a book .\n" + long_line + "\n");
  const Outcome r = gradflow(s.path, "translate --model good --input in.txt");
  CHECK(r.exit_code == 0);
  CHECK(r.stdout_lines == 2);
  CHECK(r.out.find("input line 2 has 10000 tokens; the model reads at most 100") != std::string::npos);
}

TEST_CASE("bad C++ API calls name the op and both shapes") {
  Variable a(Tensor::zeros({2, 5, 16})), b(Tensor::zeros({12, 16}));
  CHECK_THROWS_WITH_AS(matmul(a, b), doctest::Contains("(2, 5, 16) @ (12, 16)"), std::invalid_argument);
  Variable logits(Tensor::zeros({4, 10}));
  CHECK_THROWS_WITH_AS(cross_entropy(logits, Tensor::zeros({4})), doctest::Contains("target must be int64"), std::invalid_argument);
  CHECK_THROWS_AS(cross_entropy(logits, Tensor::from_vector(std::vector<int64_t>{0, 1, 12, 2}, {4})), std::out_of_range);
  nn::MultiheadAttention mha(16, 4);
  Variable x(Tensor::zeros({2, 3, 16})), wrong(Tensor::zeros({2, 3, 8}));
  CHECK_THROWS_WITH_AS(mha.forward(wrong, x, x), doctest::Contains("must be (B, len, 16), got (2, 3, 8)"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(mha.forward(x, x, x, Tensor::zeros({2, 4}, DType::Bool)), doctest::Contains("key_padding_mask"), std::invalid_argument);
  CHECK_THROWS_AS(nn::MultiheadAttention(30, 4), std::invalid_argument);
}
