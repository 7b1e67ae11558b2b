#pragma once
// A digest of byte ranges, for checking that a file reads back as it was written: xxHash's XXH3
// (64 bits; Debian's libxxhash-dev), fast enough to check every load (tens of GB/s).
#include <cstddef>
#include <memory>
#include <string>

namespace gf {

class Digest {
 public:
  Digest();
  ~Digest();
  Digest(const Digest&) = delete;
  Digest& operator=(const Digest&) = delete;
  void add(const void* data, size_t n);  // the bytes, in order
  std::string text() const;              // "xxh3-64:" and 16 hex digits, of everything added so far

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace gf
