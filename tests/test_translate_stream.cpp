// gradflow translate as a stream (app/cmd_translate.cpp): each line is translated and written as
// soon as it has arrived, without waiting for the end of the input; its flags are checked before
// anything is read; a UTF-8 byte-order mark on stdin is dropped; and an empty stdin, or a terminal,
// is an error that says so. Each case runs the real program with its stdin and stdout on pipes.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/child_process.h"
#include "tests/temp_dir.h"
#include "train/loop/trainer.h"

#include "tiny_run.h"

using namespace gf;
using namespace gf::test;
namespace fs = std::filesystem;

namespace {

// A small trained model of the built-in corpus.
fs::path trained(const TempDir& tmp) {
  train::RunConfig c = tiny_run(600);
  c.steps = 4;
  const train::TrainOptions o = quiet_options((tmp.path / "model").string());
  train::train_translator(c, o);
  return o.out;
}

// `gradflow translate ARGS` with stdin from `in_fd` (given to the child) and stdout on a pipe.
// Every other descriptor of the test is close-on-exec, so the child holds no write end of its own
// stdin and sees its end when the test closes it.
struct Translate {
  pid_t pid = -1;
  int out = -1;  // the child's stdout, read end
  fs::path err;
  Translate(const std::vector<std::string>& args, int in_fd, const fs::path& err_file) : err(err_file) {
    int p[2];
    REQUIRE(::pipe2(p, O_CLOEXEC) == 0);
    pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      const int e = ::open(err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0666);
      ::dup2(in_fd, 0), ::dup2(p[1], 1), ::dup2(e, 2);
      ::close(p[0]);
      ::signal(SIGPIPE, SIG_DFL);
      std::vector<std::string> all{std::string(GRADFLOW_BINARY_DIR) + "/gradflow", "translate"};
      all.insert(all.end(), args.begin(), args.end());
      std::vector<char*> argv;
      for (std::string& a : all) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(124);
    }
    ::close(p[1]);
    out = p[0];
  }
  ~Translate() {
    if (out >= 0) ::close(out);
  }
  // One line of output, waiting at most `seconds`; "<timeout>" or "<eof>" otherwise.
  std::string line(double seconds) {
    std::string s;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    for (char c;;) {
      const int left = static_cast<int>(std::chrono::duration<double, std::milli>(deadline - std::chrono::steady_clock::now()).count());
      pollfd pfd{out, POLLIN, 0};
      if (left <= 0 || ::poll(&pfd, 1, left) <= 0) return "<timeout>";
      if (::read(out, &c, 1) != 1) return "<eof>";
      if (c == '\n') return s;
      s += c;
    }
  }
  // The exit status, waiting at most `seconds` (then killed: the test fails).
  int wait(double seconds) { return wait_child(Child{pid, {}, {}}, seconds); }
};

int exit_code(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : -1; }

// `gradflow translate --model MODEL --input FILE ARGS`, run to its end.
Ran translate_file(const TempDir& tmp, const std::string& model, const std::string& file, const std::vector<std::string>& args = {}) {
  std::vector<std::string> all{"translate", "--model", model, "--input", tmp.file(file)};
  all.insert(all.end(), args.begin(), args.end());
  return run_child(std::string(GRADFLOW_BINARY_DIR) + "/gradflow", all, tmp.path / (file + ".run"), 120);
}

// The lines of `text`, each without its '\n'.
std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  for (size_t at = 0, nl; (nl = text.find('\n', at)) != std::string::npos; at = nl + 1) lines.push_back(text.substr(at, nl - at));
  return lines;
}

void write_all(int fd, const std::string& s) { REQUIRE(::write(fd, s.data(), s.size()) == static_cast<ssize_t>(s.size())); }

}  // namespace

TEST_CASE("translate answers each line of a pipe before the pipe closes; a BOM on stdin is dropped") {
  TempDir tmp("gf_translate_stream");
  const std::string model = trained(tmp).string();
  // The reference: the same sentences from a file, read whole.
  tmp.write("in.txt", "i read a book .\nthe teacher will not drink coffee tomorrow .\n");
  Ran ref = run_child(std::string(GRADFLOW_BINARY_DIR) + "/gradflow", {"translate", "--model", model, "--input", tmp.file("in.txt")},
                      tmp.path / "ref", 120);
  REQUIRE(ref.exit_code() == 0);
  const std::string first = ref.out.substr(0, ref.out.find('\n')), second = ref.out.substr(ref.out.find('\n') + 1);

  int in[2];
  REQUIRE(::pipe2(in, O_CLOEXEC) == 0);  // close-on-exec: the child holds only its stdin
  Translate t({"--model", model}, in[0], tmp.path / "stream.err");
  ::close(in[0]);
  write_all(in[1], "\xEF\xBB\xBFi read a book .\n");  // the write end stays open
  CHECK(t.line(60) == first);
  write_all(in[1], "the teacher will not drink coffee tomorrow .\n");
  CHECK(t.line(60) + "\n" == second);
  ::close(in[1]);
  CHECK(t.line(60) == "<eof>");
  CHECK(exit_code(t.wait(60)) == 0);
}

TEST_CASE("translate checks its flags before reading anything") {
  TempDir tmp("gf_translate_stream");
  const std::string model = trained(tmp).string();
  int in[2];
  REQUIRE(::pipe2(in, O_CLOEXEC) == 0);  // close-on-exec: the child holds only its stdin
  Translate t({"--model", model, "--beam", "0"}, in[0], tmp.path / "beam.err");
  ::close(in[0]);
  const int status = t.wait(30);  // the write end is still open: nothing was read, nothing awaited
  ::close(in[1]);
  CHECK(exit_code(status) == 2);
  CHECK(slurp(tmp.path / "beam.err").find("--beam must be 1 to 256, got 0") != std::string::npos);
}

TEST_CASE("an empty stdin, or a terminal, is 'no input on stdin'; bad UTF-8 names stdin and the line") {
  TempDir tmp("gf_translate_stream");
  const std::string model = trained(tmp).string();
  tmp.write("first.txt", "i read a book .\n");
  const Ran ref = translate_file(tmp, model, "first.txt");
  REQUIRE(ref.exit_code() == 0);
  REQUIRE(lines_of(ref.out).size() == 1);
  const std::string first = lines_of(ref.out)[0];
  {  // empty
    int in[2];
    REQUIRE(::pipe2(in, O_CLOEXEC) == 0);  // close-on-exec: the child holds only its stdin
    ::close(in[1]);
    Translate t({"--model", model}, in[0], tmp.path / "empty.err");
    ::close(in[0]);
    CHECK(exit_code(t.wait(60)) == 2);
    CHECK(slurp(tmp.path / "empty.err").find("no input on stdin (it was empty)") != std::string::npos);
  }
  {  // a terminal: a pseudo-terminal's slave side as stdin
    const int master = ::posix_openpt(O_RDWR | O_NOCTTY);
    REQUIRE(master >= 0);
    ::fcntl(master, F_SETFD, FD_CLOEXEC);
    REQUIRE(::grantpt(master) == 0);
    REQUIRE(::unlockpt(master) == 0);
    const int slave = ::open(::ptsname(master), O_RDWR | O_NOCTTY | O_CLOEXEC);
    REQUIRE(slave >= 0);
    Translate t({"--model", model}, slave, tmp.path / "tty.err");
    ::close(slave);
    CHECK(exit_code(t.wait(60)) == 2);
    ::close(master);
    CHECK(slurp(tmp.path / "tty.err").find("no input on stdin (it is a terminal)") != std::string::npos);
  }
  {  // invalid UTF-8 on line 2: line 1 is answered first
    int in[2];
    REQUIRE(::pipe2(in, O_CLOEXEC) == 0);  // close-on-exec: the child holds only its stdin
    Translate t({"--model", model}, in[0], tmp.path / "utf.err");
    ::close(in[0]);
    write_all(in[1], "i read a book .\n");
    CHECK(t.line(60) == first);
    write_all(in[1], "bad \xC3\x28 byte\n");
    ::close(in[1]);
    CHECK(exit_code(t.wait(60)) == 1);
    CHECK(slurp(tmp.path / "utf.err").find("stdin:2: invalid UTF-8 at byte 5 (0xc3)") != std::string::npos);
  }
  {  // the same two lines in one write: line 1 is still answered before the error
    int in[2];
    REQUIRE(::pipe2(in, O_CLOEXEC) == 0);  // close-on-exec: the child holds only its stdin
    Translate t({"--model", model}, in[0], tmp.path / "utf2.err");
    ::close(in[0]);
    write_all(in[1], "i read a book .\nbad \xC3\x28 byte\n");
    ::close(in[1]);
    CHECK(t.line(60) == first);
    CHECK(t.line(60) == "<eof>");  // nothing for the bad line
    CHECK(exit_code(t.wait(60)) == 1);
    CHECK(slurp(tmp.path / "utf2.err").find("stdin:2: invalid UTF-8") != std::string::npos);
  }
}

TEST_CASE("--skip-bad-lines: a bad or over-long line gets an empty output line and a warning; without it, the error stops translate") {
  TempDir tmp("gf_translate_stream");
  const std::string model = trained(tmp).string();
  const std::string a = "i read a book .", b = "the teacher will not drink coffee tomorrow .";
  tmp.write("good.txt", a + "\n" + b + "\n");
  const Ran ref = translate_file(tmp, model, "good.txt");
  REQUIRE(ref.exit_code() == 0);
  const std::vector<std::string> good = lines_of(ref.out);
  REQUIRE(good.size() == 2);
  // Line 2 is not UTF-8; line 3 is 200,000 bytes, over --max-line-bytes 1000 and longer than one
  // 64 KiB read, so it is refused before its end has arrived and the rest of it is skipped.
  tmp.write("mixed.txt", a + "\n" + "bad \xC3\x28 byte\n" + std::string(200000, 'x') + "\n" + b + "\n");
  const Ran skipped = translate_file(tmp, model, "mixed.txt", {"--max-line-bytes", "1000", "--skip-bad-lines"});
  INFO(skipped.err);
  CHECK(skipped.exit_code() == 0);
  CHECK(lines_of(skipped.out) == std::vector<std::string>{good[0], "", "", good[1]});
  CHECK(skipped.out == good[0] + "\n\n\n" + good[1] + "\n");
  const std::string in = tmp.file("mixed.txt");
  CHECK(skipped.err.find("translate: warning: " + in + ":2: invalid UTF-8 at byte 5 (0xc3); its output line is left empty (--skip-bad-lines)") !=
        std::string::npos);
  CHECK(skipped.err.find("translate: warning: " + in + ":3: line is longer than 1000 bytes (the limit; --max-line-bytes raises it); its output "
                         "line is left empty (--skip-bad-lines)") != std::string::npos);

  const Ran stopped = translate_file(tmp, model, "mixed.txt", {"--max-line-bytes", "1000"});
  INFO(stopped.err);
  CHECK(stopped.exit_code() == 1);
  CHECK(lines_of(stopped.out) == std::vector<std::string>{good[0]});  // the line before the bad one, then the stop
  CHECK(stopped.err.find(in + ":2: invalid UTF-8 at byte 5 (0xc3)") != std::string::npos);
  CHECK(stopped.err.find("warning") == std::string::npos);

  tmp.write("long.txt", a + "\n" + std::string(200000, 'x') + "\n" + b + "\n");
  const Ran too_long = translate_file(tmp, model, "long.txt", {"--max-line-bytes", "1000"});
  INFO(too_long.err);
  CHECK(too_long.exit_code() == 1);
  CHECK(lines_of(too_long.out) == std::vector<std::string>{good[0]});
  CHECK(too_long.err.find(tmp.file("long.txt") + ":2: line is longer than 1000 bytes") != std::string::npos);
}
