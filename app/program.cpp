// gradflow: the command-line program's dispatch. `gradflow --help` lists the subcommands
// (app/commands.cpp); app/main.cpp is its main().
#include <fmt/core.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

#include "app/commands.h"
#include "app/flags.h"
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

int run_program(int argc, char** argv) {
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
      const std::string v = argv[++i];
      char* end = nullptr;
      errno = 0;
      const long n = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || errno != 0 || n <= 0 || n > 65536) {
        fmt::print(stderr, "gradflow: --threads expects a positive integer, got '{}'\n", v);
        return 2;
      }
      threads = static_cast<int>(n);
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
