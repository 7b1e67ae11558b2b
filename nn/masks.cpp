#include "nn/masks.h"

#include <mutex>
#include <stdexcept>

#include "tensor/check.h"

namespace gf::nn {
namespace {

// Only bool (blocked) and floating (added) masks have a meaning; an int64 0/1 mask would be added
// as a +1 bias where it meant "blocked", so it is refused.
void check_mask_dtype(const Tensor& m, const char* what) {
  GF_CHECK(!m.defined() || m.dtype() == DType::Bool || is_floating(m.dtype()),
           "MultiheadAttention: {} must be bool or floating, got {} {}", what, dtype_name(m.dtype()), shape_str(m.shape()));
}

}  // namespace

Tensor make_pad_mask(const Tensor& ids, int64_t pad) {
  check_dtype(ids, DType::Int64, "make_pad_mask");
  GF_CHECK(ids.ndim() == 2, "make_pad_mask: expected ids (B, S), got {}", shape_str(ids.shape()));
  Tensor c = ids.contiguous();
  Tensor mask = Tensor::empty(ids.shape(), DType::Bool);  // (B, S)
  const int64_t* p = c.data<int64_t>();
  bool* m = mask.data<bool>();
  for (int64_t i = 0; i < c.numel(); ++i) m[i] = p[i] == pad;
  return mask;
}

Tensor make_causal_mask(int64_t n) {
  static std::mutex mu;
  static Tensor cached;  // (N, N) for the longest N so far
  std::lock_guard<std::mutex> lock(mu);
  GF_CHECK(n >= 0, "make_causal_mask: negative size {}", n);
  if (!cached.defined() || cached.size(0) < n) {
    int64_t N = std::max<int64_t>(n, 64);
    Tensor t = Tensor::empty({N, N}, DType::Bool);
    bool* m = t.data<bool>();
    for (int64_t i = 0; i < N; ++i)
      for (int64_t j = 0; j < N; ++j) m[i * N + j] = j > i;
    cached = t;
  }
  return cached.narrow(0, 0, n).narrow(1, 0, n);  // (n, n) view
}

void check_attention_masks(const Tensor& kpm, const Tensor& attn_mask, int64_t B, int64_t H, int64_t L, int64_t S) {
  check_mask_dtype(kpm, "key_padding_mask");
  check_mask_dtype(attn_mask, "attn_mask");
  GF_CHECK(!kpm.defined() || (kpm.ndim() == 2 && kpm.size(0) == B && kpm.size(1) == S),
           "MultiheadAttention: key_padding_mask must be ({}, {}), got {}", B, S, shape_str(kpm.shape()));
  if (attn_mask.defined()) {
    bool ok2 = attn_mask.ndim() == 2 && attn_mask.size(0) == L && attn_mask.size(1) == S;
    bool ok3 = attn_mask.ndim() == 3 && attn_mask.size(0) == B * H && attn_mask.size(1) == L && attn_mask.size(2) == S;
    GF_CHECK(ok2 || ok3, "MultiheadAttention: attn_mask must be ({}, {}) or ({}, {}, {}), got {}", L, S, B * H, L, S,
             shape_str(attn_mask.shape()));
  }
}

// OR of the boolean masks as one (B, 1, L, S) or (B, H, L, S) tensor; undefined if none is bool.
Tensor combine_bool_masks(const Tensor& kpm, const Tensor& attn, int64_t B, int64_t H, int64_t L, int64_t S) {
  bool kb = kpm.defined() && kpm.dtype() == DType::Bool;
  bool ab = attn.defined() && attn.dtype() == DType::Bool;
  if (!kb && !ab) return Tensor();
  const int64_t Hm = ab && attn.ndim() == 3 ? H : 1;
  Tensor out = Tensor::zeros({B, Hm, L, S}, DType::Bool);  // (B, Hm, L, S)
  bool* o = out.data<bool>();
  Tensor k = kb ? kpm.contiguous() : Tensor();   // (B, S)
  Tensor a = ab ? attn.contiguous() : Tensor();  // (L, S) or (B*H, L, S)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hm; ++h)
      for (int64_t l = 0; l < L; ++l) {
        bool* row = o + ((b * Hm + h) * L + l) * S;
        const bool* krow = kb ? k.data<bool>() + b * S : nullptr;
        const bool* arow = !ab ? nullptr : a.ndim() == 2 ? a.data<bool>() + l * S : a.data<bool>() + ((b * H + h) * L + l) * S;
        for (int64_t s = 0; s < S; ++s) row[s] = (krow && krow[s]) || (arow && arow[s]);
      }
  return out;
}

}  // namespace gf::nn
