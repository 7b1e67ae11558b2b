// gradflow: the command-line program's dispatch. `gradflow --help` lists the subcommands
// (app/commands.cpp); app/main.cpp is its main().
#include <fmt/core.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

#include "app/command_flags.h"
#include "app/commands.h"
#include "app/flags.h"
#include "tensor/check.h"
#include "tensor/parallel.h"
#include "tensor/runtime.h"
#include "train/distributed/comm.h"
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

namespace dist = gf::train::distributed;

// How a command's error ends the process. Under mpirun with several processes, an error that one
// process met alone ends the whole job (MPI_Abort), or the others would wait for it forever; an
// error every process met together (an agreed stop) is printed once, by rank 0, and each ends
// normally.
int fail(const std::string& message, int code, bool together) {
  if (!together || dist::is_root()) fmt::print(stderr, "{}{}\n", together ? "" : dist::rank_prefix(), message);
  if (dist::several() && !together) dist::abort_job(code);
  dist::finalize();
  return code;
}

}  // namespace

namespace gf::app {

GlobalFlags parse_global_flags(int argc, char** argv) {
  GlobalFlags g;
  int i = 1;
  // Global flags come before the command; --threads may also appear among a command's flags.
  for (; i < argc && argv[i][0] == '-'; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      g.help = true;
      break;
    }
    if (a == "--version") {
      g.version = true;
      break;
    }
    if (a == "--threads") {
      GF_CHECK_AS(UsageError, i + 1 < argc, "--threads needs a value");
      const std::string v = argv[++i];
      char* end = nullptr;
      errno = 0;
      const long n = std::strtol(v.c_str(), &end, 10);
      GF_CHECK_AS(UsageError, !v.empty() && *end == '\0' && errno == 0 && n > 0 && n <= 65536,
                  "--threads expects a positive integer, got '{}'", v);
      g.threads = static_cast<int>(n);
      continue;
    }
    GF_FAIL_AS(UsageError, "unknown flag {} (see gradflow --help)", a);
  }
  g.command = i;
  return g;
}

int run_program(int argc, char** argv) {
  gf::init_runtime(argc, argv);
  GlobalFlags g;
  try {
    g = parse_global_flags(argc, argv);
  } catch (const UsageError& e) {
    fmt::print(stderr, "gradflow: {}\n", e.what());
    return 2;
  }
  if (g.version) {
    gf::set_num_threads(g.threads);
    return cmd_info(0, nullptr);
  }
  if (g.help || g.command >= argc) {
    print_help();
    return g.help ? 0 : 2;  // no command at all is a usage error
  }
  const int i = g.command;
  const int threads = g.threads;
  gf::set_num_threads(threads);
  std::string name = argv[i];
  for (const auto& c : gf::app::commands()) {
    if (name != c.name) continue;
    try {
      const int code = c.run(argc - i - 1, argv + i + 1);
      dist::finalize();
      return code;
    } catch (const gf::train::Interrupted& e) {  // the signal was agreed on by every process
      return fail(fmt::format("gradflow {}: {}", name, e.what()), 128 + e.signal, true);
    } catch (const gf::app::UsageError& e) {
      return fail(fmt::format("gradflow {}", e.what()), 2, false);
    } catch (const dist::AgreedError& e) {
      return fail(fmt::format("gradflow {}: error: {}", name, e.what()), 1, true);
    } catch (const std::exception& e) {
      return fail(fmt::format("gradflow {}: error: {}", name, e.what()), 1, false);
    }
  }
  fmt::print(stderr, "gradflow: unknown command '{}' (see gradflow --help)\n", name);
  return 2;
}

}  // namespace gf::app
