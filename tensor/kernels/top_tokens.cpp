#include "tensor/kernels/top_tokens.h"

#include <algorithm>
#include <type_traits>

#ifdef __AVX512F__
#include <immintrin.h>
#endif

namespace gf::kernels {
namespace {

// With AVX-512, one subtraction and one comparison to a mask (inlined into the scan, a plain loop
// is unrolled into 16 scalar compares instead); the same arithmetic, so the same answer, either way.
template <class T>
inline bool any_beats(const T* x, T shift, T cut) {
#ifdef __AVX512F__
  if constexpr (std::is_same_v<T, float>) {
    const __m512 lp = _mm512_sub_ps(_mm512_loadu_ps(x), _mm512_set1_ps(shift));
    return _mm512_cmp_ps_mask(lp, _mm512_set1_ps(cut), _CMP_GT_OQ) != 0;
  }
#endif
  bool any = false;
  for (int l = 0; l < 16; ++l) any |= x[l] - shift > cut;
  return any;
}

bool listed(std::span<const int64_t> never, int64_t v) { return std::find(never.begin(), never.end(), v) != never.end(); }

// A block of 16 is skipped only when the list is full and none of its raw values beats the list's
// last (a shorter last block is always scanned); the test leaves `never` out of account, so it may
// only let a block through that then yields nothing.
template <class T>
std::vector<ScoredToken> scan(const T* x, int64_t V, T shift, int64_t n, std::span<const int64_t> never) {
  constexpr int64_t kBlock = 16;  // any_beats
  n = std::min(n, V);
  std::vector<ScoredToken> top;
  if (n <= 0) return top;  // the scan compares with top.back()
  top.reserve(static_cast<size_t>(n) + 1);
  for (int64_t v0 = 0; v0 < V; v0 += kBlock) {
    const int64_t v1 = std::min(V, v0 + kBlock);
    if (static_cast<int64_t>(top.size()) == n && v1 - v0 == kBlock && !any_beats(x + v0, shift, static_cast<T>(top.back().log_prob))) continue;
    for (int64_t v = v0; v < v1; ++v) {
      if (listed(never, v)) continue;
      const T lp = x[v] - shift;
      if (static_cast<int64_t>(top.size()) == n && !(lp > top.back().log_prob)) continue;
      size_t at = top.size();
      while (at > 0 && lp > top[at - 1].log_prob) --at;  // after every value >= it: ties keep token order
      top.insert(top.begin() + static_cast<std::ptrdiff_t>(at), ScoredToken{lp, v});
      if (static_cast<int64_t>(top.size()) > n) top.pop_back();
    }
  }
  return top;
}

template <class T>
std::vector<ScoredToken> sort_all(const T* x, int64_t V, T shift, int64_t n, std::span<const int64_t> never) {
  std::vector<ScoredToken> all;
  for (int64_t v = 0; v < V; ++v)
    if (!listed(never, v)) all.push_back({static_cast<T>(x[v] - shift), v});
  std::stable_sort(all.begin(), all.end(), [](const ScoredToken& a, const ScoredToken& b) { return a.log_prob > b.log_prob; });
  all.resize(std::min(all.size(), static_cast<size_t>(std::max<int64_t>(n, 0))));
  return all;
}

}  // namespace

std::vector<ScoredToken> top_tokens(const float* x, int64_t V, float shift, int64_t n, std::span<const int64_t> never) {
  return scan(x, V, shift, n, never);
}
std::vector<ScoredToken> top_tokens(const double* x, int64_t V, double shift, int64_t n, std::span<const int64_t> never) {
  return scan(x, V, shift, n, never);
}

std::vector<ScoredToken> top_tokens_reference(const float* x, int64_t V, float shift, int64_t n, std::span<const int64_t> never) {
  return sort_all(x, V, shift, n, never);
}
std::vector<ScoredToken> top_tokens_reference(const double* x, int64_t V, double shift, int64_t n, std::span<const int64_t> never) {
  return sort_all(x, V, shift, n, never);
}

bool any_of_16_beats(const float* x, float shift, float cut) { return any_beats(x, shift, cut); }
bool any_of_16_beats(const double* x, double shift, double cut) { return any_beats(x, shift, cut); }

}  // namespace gf::kernels
