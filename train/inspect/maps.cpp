// Attention maps in double and their rollouts (declared in train/inspect/maps.h).
#include "train/inspect/maps.h"

#include <cmath>

#include "tensor/check.h"

namespace gf::train::inspect {

std::vector<Map> heads_of(const Tensor& w) {
  const Tensor t = w.select(0, 0).to(DType::Float64).contiguous();  // (H, L, S)
  const int64_t H = t.size(0), L = t.size(1), S = t.size(2);
  const double* p = t.data<double>();
  std::vector<Map> out(static_cast<size_t>(H), Map(static_cast<size_t>(L), std::vector<double>(static_cast<size_t>(S))));
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = 0; j < S; ++j) out[h][i][j] = p[(h * L + i) * S + j];
  return out;
}

Map map_product(const Map& a, const Map& b) {
  Map c(a.size(), std::vector<double>(b.at(0).size(), 0.0));
  for (size_t i = 0; i < a.size(); ++i)
    for (size_t k = 0; k < b.size(); ++k)
      for (size_t j = 0; j < c[i].size(); ++j) c[i][j] += a[i][k] * b[k][j];
  return c;
}

Map head_mean(const std::vector<Map>& heads) {
  GF_CHECK(!heads.empty(), "head_mean: no heads");
  Map m(heads[0].size(), std::vector<double>(heads[0].at(0).size(), 0.0));
  for (const Map& h : heads)
    for (size_t i = 0; i < m.size(); ++i)
      for (size_t j = 0; j < m[i].size(); ++j) m[i][j] += h.at(i).at(j) / static_cast<double>(heads.size());
  return m;
}

Map abs_map(const Map& m) {
  Map a = m;
  for (auto& row : a)
    for (double& v : row) v = std::abs(v);
  return a;
}

double total_variation(const std::vector<double>& a, const std::vector<double>& b) {
  GF_CHECK(a.size() == b.size(), "total_variation: distributions of {} and {} values", a.size(), b.size());
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += std::abs(a[i] - b[i]);
  return 0.5 * s;
}

namespace {

// 0.5 A + 0.5 I for a square A: the residual connection, as Abnar and Zuidema add it.
Map with_residual(const Map& a, const char* what) {
  Map r = a;
  for (size_t i = 0; i < r.size(); ++i) {
    GF_CHECK(r[i].size() == r.size(), "attention_rollout: {} is not square: row {} has {} values for {} rows", what, i, r[i].size(),
             r.size());
    for (double& v : r[i]) v *= 0.5;
    r[i][i] += 0.5;
  }
  return r;
}

}  // namespace

Rollout attention_rollout(const std::vector<Map>& enc_self, const std::vector<Map>& dec_self, const std::vector<Map>& cross) {
  GF_CHECK(!enc_self.empty() && !cross.empty() && dec_self.size() == cross.size(),
           "attention_rollout: need encoder layers, and one decoder self- and cross-attention per decoder layer; got {} encoder, {} "
           "decoder self- and {} cross-attention maps",
           enc_self.size(), dec_self.size(), cross.size());
  const size_t S = enc_self[0].size(), T = cross[0].size();
  Rollout r;
  r.encoder = Map(S, std::vector<double>(S, 0.0));
  for (size_t i = 0; i < S; ++i) r.encoder[i][i] = 1;
  for (const Map& a : enc_self) r.encoder = map_product(with_residual(a, "an encoder self-attention"), r.encoder);  // (S, S)
  // P (T, S + T): source part first, then target tokens; each position starts at its own token.
  Map P(T, std::vector<double>(S + T, 0.0));
  for (size_t t = 0; t < T; ++t) P[t][S + t] = 1;
  for (size_t l = 0; l < cross.size(); ++l) {
    GF_CHECK(dec_self[l].size() == T && cross[l].size() == T && cross[l].at(0).size() == S,
             "attention_rollout: decoder layer {} has maps of other sizes: self-attention {} rows, cross-attention {} rows; expected T = {} "
             "rows and S = {} source columns",
             l, dec_self[l].size(), cross[l].size(), T, S);
    P = map_product(with_residual(dec_self[l], "a decoder self-attention"), P);  // (T, S + T)
    const Map pulled = map_product(cross[l], r.encoder);                      // (T, S)
    for (size_t t = 0; t < T; ++t) {
      for (double& v : P[t]) v *= 0.5;
      for (size_t s = 0; s < S; ++s) P[t][s] += 0.5 * pulled[t][s];
    }
  }
  r.source = Map(T, std::vector<double>(S));
  r.source_share.assign(T, 0.0);
  for (size_t t = 0; t < T; ++t) {
    for (size_t s = 0; s < S; ++s) r.source_share[t] += P[t][s];
    for (size_t s = 0; s < S; ++s) r.source[t][s] = P[t][s] / r.source_share[t];
  }
  return r;
}

Map stack_rollout(const std::vector<Map>& layers) {
  GF_CHECK(!layers.empty(), "stack_rollout: no layers");
  const size_t L = layers[0].size();
  Map r(L, std::vector<double>(L, 0.0));
  for (size_t i = 0; i < L; ++i) r[i][i] = 1;
  for (size_t l = 0; l < layers.size(); ++l) {
    Map a = layers[l];
    GF_CHECK(a.size() == L, "stack_rollout: layer {} has {} rows, layer 0 has {}", l, a.size(), L);
    for (size_t i = 0; i < L; ++i) {
      GF_CHECK(a[i].size() == L, "stack_rollout: layer {} row {} has {} values for {} rows", l, i, a[i].size(), L);
      for (double& v : a[i]) v *= 0.5;
      a[i][i] += 0.5;  // the residual connection, as Abnar and Zuidema add it
    }
    r = map_product(a, r);  // (L, L)
  }
  return r;
}

}  // namespace gf::train::inspect
