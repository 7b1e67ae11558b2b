// A real full disk: a tmpfs too small for the second epoch's files. Mounting needs root with
// CAP_SYS_ADMIN; where that is refused the program exits 77, which CTest reports as skipped (not
// passed). tests/test_full_disk.cpp runs the same failure everywhere, through the test seam's
// ENOSPC, at every kind of file a run writes; this one confirms that a real file system's ENOSPC
// takes the same path.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "tests/fault_util.h"

using namespace gf;
using namespace gf::train;
using namespace gf::test;
namespace fs = std::filesystem;

namespace {

bool can_mount_tmpfs() {
  TempDir probe("gf_mount_probe");
  if (std::system(("mount -t tmpfs -o size=64k tmpfs " + probe.path.string() + " 2>/dev/null").c_str()) != 0) return false;
  return std::system(("umount " + probe.path.string()).c_str()) == 0;
}

}  // namespace

TEST_CASE("a full tmpfs: No space left on device, nothing lost, resume after space is freed") {
  if (!can_mount_tmpfs()) {
    std::fprintf(stderr, "skipped: this machine does not allow mounting a tmpfs (needs root with CAP_SYS_ADMIN)\n");
    std::exit(77);
  }
  Setup s;
  const fs::path mnt = s.tmp.path / "small-disk";
  fs::create_directories(mnt);
  const fs::path ref = s.trained("size-reference", 1);
  const RunState rs = load_state(ref.string());
  // Room for one epoch's files (best, model, optimizer, small files) but not the next best's copy.
  const uintmax_t room = 2 * fs::file_size(ref / rs.model_file) + fs::file_size(ref / rs.optim_file) + 64 * 1024;
  const std::string mount = fmt::format("mount -t tmpfs -o size={} tmpfs {} 2>/dev/null", room, mnt.string());
  REQUIRE(std::system(mount.c_str()) == 0);
  struct Unmount {
    fs::path at;
    ~Unmount() { [[maybe_unused]] int rc = std::system(("umount " + at.string()).c_str()); }
  } unmount{mnt};
  const fs::path out = mnt / "run";
  Ran first = run(gradflow_binary(), s.train_args(out, 1), s.tmp.path / "disk-1");
  INFO(first.err);
  REQUIRE(first.exit_code() == 0);
  const auto before = snapshot(out);
  Ran r = run(gradflow_binary(), Setup::resume_args(out, 3), s.tmp.path / "disk-2");
  INFO(r.err);
  CHECK(r.exit_code() == 1);
  CHECK(r.err.find("No space left on device") != std::string::npos);
  CHECK(r.err.find(out.string() + "/") != std::string::npos);
  CHECK(snapshot(out) == before);
  check_loadable(out);
  const std::string grow = fmt::format("mount -o remount,size={} {}", 4 * room, mnt.string());
  REQUIRE(std::system(grow.c_str()) == 0);
  Ran again = run(gradflow_binary(), Setup::resume_args(out, 3), s.tmp.path / "disk-3");
  CHECK(again.exit_code() == 0);
  CHECK(load_state(out.string()).epoch == 4);
}

