#include "tensor/io/digest.h"

#include <fmt/core.h>

// xxHash compiled into this file: nothing more to link. GCC 12 warns inside its own AVX-512
// intrinsics as xxHash inlines them (-Wmaybe-uninitialized on __Y, a false positive), so this file
// alone silences that warning.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace gf {

struct Digest::State {
  XXH3_state_t xxh;
};

Digest::Digest() : state_(std::make_unique<State>()) { XXH3_64bits_reset(&state_->xxh); }
Digest::~Digest() = default;

void Digest::add(const void* data, size_t n) { XXH3_64bits_update(&state_->xxh, data, n); }

std::string Digest::text() const { return fmt::format("xxh3-64:{:016x}", XXH3_64bits_digest(&state_->xxh)); }

}  // namespace gf
