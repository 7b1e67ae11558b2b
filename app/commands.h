#pragma once
// The subcommands of the gradflow program. Each takes the arguments after its name and returns
// the process exit code; usage errors throw app::UsageError.
#include <string>
#include <vector>

namespace gf::app {

struct Command {
  const char* name;
  const char* summary;
  int (*run)(int argc, char** argv);
};

// The whole program: global flags, then the command; returns the exit code (app/main.cpp's main).
int run_program(int argc, char** argv);

// All subcommands, in the order `gradflow --help` lists them.
const std::vector<Command>& commands();

int cmd_info(int argc, char** argv);
int cmd_train(int argc, char** argv);
int cmd_translate(int argc, char** argv);
int cmd_eval(int argc, char** argv);
int cmd_bleu(int argc, char** argv);
int cmd_attention(int argc, char** argv);
int cmd_report(int argc, char** argv);
int cmd_bench(int argc, char** argv);
int cmd_demo(int argc, char** argv);
int cmd_lab(int argc, char** argv);
int cmd_corpus(int argc, char** argv);
int cmd_average(int argc, char** argv);

}  // namespace gf::app
