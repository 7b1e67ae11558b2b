#include "train/distributed/replicas.h"

#include <fmt/core.h>
#include <fmt/ranges.h>

#include <cstring>

#include "tensor/check.h"
#include "tensor/mix64.h"
#include "train/distributed/comm.h"

namespace gf::train::distributed {
namespace {

// A digest as two exact halves (each below 2^32, so exact in a double), for an agreement.
void halves(uint64_t d, double* out) {
  out[0] = static_cast<double>(d >> 32);
  out[1] = static_cast<double>(d & 0xFFFFFFFFULL);
}

// Whether every process holds the same digests: the maximum and the minimum of each half agree.
bool all_equal(Agreement tag, const std::vector<uint64_t>& digests) {
  std::vector<double> v(4 * digests.size());
  for (size_t i = 0; i < digests.size(); ++i) {
    halves(digests[i], &v[4 * i]);
    v[4 * i + 2] = -v[4 * i], v[4 * i + 3] = -v[4 * i + 1];
  }
  agree(tag, Combine::Max, v);
  for (size_t i = 0; i < digests.size(); ++i)
    if (v[4 * i] != -v[4 * i + 2] || v[4 * i + 1] != -v[4 * i + 3]) return false;
  return true;
}

std::string encode(const std::vector<uint64_t>& d) {
  std::string s(d.size() * sizeof(uint64_t), '\0');
  std::memcpy(s.data(), d.data(), s.size());
  return s;
}

std::vector<uint64_t> decode(const std::string& s) {
  std::vector<uint64_t> d(s.size() / sizeof(uint64_t));
  std::memcpy(d.data(), s.data(), d.size() * sizeof(uint64_t));
  return d;
}

}  // namespace

uint64_t digest_bytes(const void* data, size_t n, uint64_t seed) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  uint64_t h = mix64(seed ^ (n * 0x9E3779B97F4A7C15ULL));
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = mix64(h ^ w) + 0x632BE59BD9B4E019ULL;
  }
  uint64_t tail = 0;
  if (n > i) std::memcpy(&tail, p + i, n - i);  // n == 0 may come with p == nullptr (a scalar's shape)
  return mix64(h ^ tail ^ (n - i));
}

uint64_t digest_tensors(const std::vector<Tensor>& tensors, uint64_t seed) {
  uint64_t h = seed;
  for (const Tensor& t : tensors) {
    const Tensor c = t.contiguous();
    h = digest_bytes(c.shape().data(), c.shape().size() * sizeof(int64_t), h ^ static_cast<uint64_t>(c.dtype()));
    h = digest_bytes(c.raw_data(), c.nbytes(), h);
  }
  return h;
}

void agree_on_setup(const SetupDigest& mine) {
  if (!several()) return;
  std::vector<uint64_t> d;
  for (const SetupDigest::Part& p : mine.parts) d.push_back(p.digest ^ mix64(static_cast<uint64_t>(p.count)));
  if (all_equal(Agreement::SetupDigest, d)) return;
  // Rank 0 learns every process's parts (digests and counts) and names each difference.
  std::vector<uint64_t> counts;
  for (const SetupDigest::Part& p : mine.parts) counts.push_back(static_cast<uint64_t>(p.count));
  const std::vector<std::string> digests = gather(encode(d)), all_counts = gather(encode(counts));
  std::string message;
  if (is_root()) {
    const std::vector<uint64_t> d0 = decode(digests[0]), c0 = decode(all_counts[0]);
    for (size_t r = 1; r < digests.size(); ++r) {
      const std::vector<uint64_t> dr = decode(digests[r]), cr = decode(all_counts[r]);
      for (size_t i = 0; i < mine.parts.size() && i < dr.size(); ++i)
        if (dr[i] != d0[i])
          message += fmt::format("\n  rank {} differs from rank 0 in its {} ({} {} against {})", r, mine.parts[i].what, cr[i], mine.parts[i].unit,
                                 c0[i]);
    }
  }
  GF_FAIL_AS(AgreedError,
             "train: the {} processes did not build the same run:{}\n  Every process must read the same data with the same flags "
             "(on several machines: the same files at the same path); no process has trained.",
             world().size, message);
}

void share_weights(const std::vector<Variable>& params) {
  if (!several()) return;
  for (const Variable& p : params) {
    const Tensor& w = p.data();
    GF_CHECK_AS(std::logic_error, w.is_contiguous(), "share_weights: parameter {} is not contiguous", shape_str(w.shape()));
    broadcast_bytes(w.raw_data(), w.nbytes());
  }
}

void share_optimizer_state(optim::Adam& adam) {
  if (!several()) return;
  std::map<std::string, Tensor> state = adam.state_dict();  // the same names and shapes everywhere
  for (auto& [name, t] : state) {
    if (!is_root()) t = t.clone();  // received into a copy: state_dict() shares the optimizer's storage
    broadcast_bytes(t.raw_data(), t.nbytes());
  }
  if (!is_root()) adam.load_state_dict(state);
}

std::vector<int> check_replicas(const std::vector<Variable>& params, optim::Adam& adam) {
  if (!several()) return {};
  std::vector<Tensor> tensors;
  for (const Variable& p : params) tensors.push_back(p.data());
  for (const auto& [name, t] : adam.state_dict()) tensors.push_back(t);
  const uint64_t mine = digest_tensors(tensors);
  if (all_equal(Agreement::Replicas, {mine})) return {};
  const std::vector<std::string> all = gather(encode({mine}));
  std::vector<int> differ;
  for (size_t r = 1; r < all.size(); ++r)
    if (all[r] != all[0]) differ.push_back(static_cast<int>(r));
  share_weights(params);
  share_optimizer_state(adam);
  return is_root() ? differ : std::vector<int>{-1};
}

}  // namespace gf::train::distributed
