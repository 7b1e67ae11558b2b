#pragma once
// SplitMix64's finalizer (Steele, Lea and Flood, 2014): a bijection on 64-bit words in which every
// output bit depends on every input bit. The Generator of kernels/random.h draws its numbers with
// it; the layers above mix seeds and digests with it.
#include <cstdint>

namespace gf {

constexpr uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

}  // namespace gf
