// gradflow: the command-line program (app/program.cpp). It installs no test seam: the
// fault-injection points of train/loop/test_seam.h do nothing here (tests/fault_seam.cpp is the
// tests' own main, build/gradflow_faults).
#include "app/commands.h"

int main(int argc, char** argv) { return gf::app::run_program(argc, argv); }
