#pragma once
// A fresh scratch folder per test (mkdtemp: two test programs at once, or ctest -j, never share
// one), removed with everything in it at the end of the test.
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace gf::test {

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& tag = "gf_test") {
    std::string tmpl = (std::filesystem::temp_directory_path() / (tag + "_XXXXXX")).string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path / name).string(); }
  // Writes `bytes` to path/name, creating the folders on the way.
  void write(const std::string& name, const std::string& bytes) const {
    std::filesystem::create_directories((path / name).parent_path());
    std::ofstream(path / name, std::ios::binary) << bytes;
  }
};

}  // namespace gf::test
