// gradflow: the command-line program. `gradflow --help` lists the subcommands (app/commands.cpp).
#include <fmt/core.h>

#include <cstring>
#include <exception>
#include <string>

#include "app/commands.h"
#include "app/flags.h"
#include "tensor/parallel.h"
#include "tensor/runtime.h"
#include "train/loop/interrupt.h"

namespace {

void print_help() {
  fmt::print("gradflow {}: a from-scratch C++ deep-learning framework and tiny Transformer translator\n\n", GRADFLOW_VERSION);
  fmt::print("usage: gradflow [--threads N] COMMAND [flags]\n\ncommands:\n");
  for (const auto& c : gf::app::commands()) fmt::print("  {:<12}{}\n", c.name, c.summary);
  fmt::print("\nglobal flags:\n  --threads N   threads for oneTBB and OpenBLAS (default: the hardware's)\n"
             "  --version     same as `gradflow info`\n  --help        this help\n"
             "\n`gradflow COMMAND --help` shows a command's flags.\n"
             "Environment: GRADFLOW_BLAS_CORE=NAME forces an OpenBLAS kernel, =native keeps OpenBLAS's choice.\n");
}

}  // namespace

int main(int argc, char** argv) {
  gf::init_runtime(argc, argv);
  int i = 1;
  int threads = 0;
  // Global flags come before the command; --threads may also appear among a command's flags.
  for (; i < argc && argv[i][0] == '-'; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      print_help();
      return 0;
    }
    if (a == "--version") {
      gf::set_num_threads(threads);
      return gf::app::cmd_info(0, nullptr);
    }
    if (a == "--threads" && i + 1 < argc) {
      threads = std::atoi(argv[++i]);
      if (threads <= 0) {
        fmt::print(stderr, "gradflow: --threads expects a positive integer, got '{}'\n", argv[i]);
        return 2;
      }
      continue;
    }
    fmt::print(stderr, "gradflow: unknown flag {} (see gradflow --help)\n", a);
    return 2;
  }
  if (i >= argc) {
    print_help();
    return 2;
  }
  gf::set_num_threads(threads);
  std::string name = argv[i];
  for (const auto& c : gf::app::commands()) {
    if (name != c.name) continue;
    try {
      return c.run(argc - i - 1, argv + i + 1);
    } catch (const gf::train::Interrupted& e) {
      fmt::print(stderr, "gradflow {}: {}\n", name, e.what());
      return 128 + e.signal;
    } catch (const gf::app::UsageError& e) {
      fmt::print(stderr, "gradflow {}\n", e.what());
      return 2;
    } catch (const std::exception& e) {
      fmt::print(stderr, "gradflow {}: error: {}\n", name, e.what());
      return 1;
    }
  }
  fmt::print(stderr, "gradflow: unknown command '{}' (see gradflow --help)\n", name);
  return 2;
}
