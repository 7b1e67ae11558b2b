#pragma once
// Every command's flags, declared and checked without running anything or touching a file: each
// cmd_* function parses its Flags and calls its check first; the fuzz target `commands`
// (fuzz/entry.cpp) feeds all of them, and the global flags, arbitrary argument lists.
#include <string>
#include <vector>

#include "app/flags.h"

namespace gf::lab {
struct Lab;
}

namespace gf::app {

struct CommandFlags {
  const char* name;
  Flags (*flags)();                // declared, with their defaults (shown by --help)
  void (*check)(const Flags& f);   // UsageError for a bad value; reads no file
};
// Every command's, in commands()'s order, but lab's: one set per lab (lab_flags).
const std::vector<CommandFlags>& command_flags();

Flags lab_flags(const lab::Lab& l, const std::string& default_out);
void check_lab_flags(const Flags& f);  // a lab's
Flags lab_all_flags();                 // `lab all`: no check beyond parsing

// The flags before the command: `gradflow [--threads N] [--help] [--version] COMMAND ...`.
struct GlobalFlags {
  int threads = 0;      // 0: the hardware's
  bool help = false;    // --help
  bool version = false;
  int command = 0;      // argv index of the command (argc when there is none)
};
// UsageError for an unknown flag or a --threads that is not a positive integer.
GlobalFlags parse_global_flags(int argc, char** argv);

Flags train_flags();
void check_train_flags(const Flags& f);
Flags translate_flags();
void check_translate_flags(const Flags& f);
Flags eval_flags();
void check_eval_flags(const Flags& f);
Flags average_flags();
void check_average_flags(const Flags& f);
Flags bleu_flags();
void check_bleu_flags(const Flags& f);
Flags attention_flags();
void check_attention_flags(const Flags& f);
Flags bench_flags();
void check_bench_flags(const Flags& f);
Flags parity_flags();
void check_parity_flags(const Flags& f);
Flags corpus_flags();
void check_corpus_flags(const Flags& f);
Flags demo_flags();
void check_demo_flags(const Flags& f);
Flags info_flags();
void check_info_flags(const Flags& f);

}  // namespace gf::app
