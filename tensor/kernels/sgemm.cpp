#include "tensor/kernels/sgemm.h"

#include <cblas.h>
#include <fmt/core.h>
#include <fcntl.h>
#include <omp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <functional>
#include <oneapi/dnnl/dnnl.h>
#include <sstream>
#include <stdexcept>

#include "tensor/check.h"
#include "tensor/runtime.h"
#include "tensor/kernels/signal_stack.h"

namespace gf::kernels {
namespace {

// The reference model's products as one thread runs them (d_model 256, ff 1024, about 4,096
// tokens a batch cut into two slabs of rows; the weight gradients' k is the batch's tokens).
struct Shape3 {
  const char* layout;
  bool ta, tb;
  int64_t m, n, k;
};
constexpr Shape3 kShapes[] = {
    {"nt", false, true, 2048, 1024, 256},  // x W^T: feed-forward in
    {"nt", false, true, 2048, 256, 1024},  //        feed-forward out
    {"nn", false, false, 2048, 256, 1024},  // g W: into the feed-forward block
    {"nn", false, false, 2048, 1024, 256},
    {"tn", true, false, 512, 256, 4096},   // g^T x: half the rows of a 1,024 x 256 weight
    {"tn", true, false, 128, 1024, 4096},  //        half of 256 x 1,024
};

void onednn_thread() {
  // Debian's oneDNN runs on OpenMP: each thread that calls it is held to one OpenMP thread, as
  // bf16.cpp does, so a product runs on the oneTBB thread that asks for it.
  thread_local const bool once = [] {
    omp_set_num_threads(1);
    ensure_signal_stack();  // a Ctrl-C's handler never runs on oneDNN's stack (signal_stack.h)
    return true;
  }();
  (void)once;
}

double seconds_of(const std::function<void()>& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      return colon == std::string::npos ? line : line.substr(colon + 2);
    }
  return "unknown cpu";
}

// What the choice depends on: the CPU, OpenBLAS's kernel, oneDNN's version.
std::string cache_key() {
  const dnnl_version_t* v = dnnl_version();
  return fmt::format("{} | openblas {} | onednn {}.{}.{}", cpu_model(), blas_core_in_use(), v->major, v->minor, v->patch);
}

std::string cache_dir() {
  if (const char* d = std::getenv("GRADFLOW_CACHE_DIR"); d && *d) return d;
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d && *d) return std::string(d) + "/gradflow";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/gradflow";
  return "";
}

std::string cache_file(const std::string& key) {
  const std::string dir = cache_dir();
  if (dir.empty()) return "";
  uint64_t h = 1469598103934665603ULL;  // FNV-1a of the key: one file per machine kind
  for (unsigned char ch : key) h = (h ^ ch) * 1099511628211ULL;
  return fmt::format("{}/sgemm-{:016x}.txt", dir, h);
}

SgemmLibrary parse_library(const std::string& s, bool& ok) {
  ok = s == "openblas" || s == "onednn";
  return s == "onednn" ? SgemmLibrary::OneDnn : SgemmLibrary::OpenBlas;
}

std::string serialise(const SgemmChoice& c, const std::string& key, const std::string& when) {
  std::string out = fmt::format("gradflow sgemm choice 1\nkey {}\nmeasured {}\nnt {}\nnn {}\ntn {}\n", key, when, sgemm_library_name(c.nt),
                                sgemm_library_name(c.nn), sgemm_library_name(c.tn));
  for (const SgemmTiming& t : c.timings)
    out += fmt::format("timing {} {} {} {} {:.1f} {:.1f}\n", t.layout, t.m, t.n, t.k, t.openblas_gflops, t.onednn_gflops);
  return out;
}

// The choice a cache file holds for `key`, or false when it holds none (missing, another key, damaged).
bool read_cache(const std::string& file, const std::string& key, SgemmChoice& c, std::string& when) {
  std::ifstream in(file);
  std::string line;
  if (!in || !std::getline(in, line) || line != "gradflow sgemm choice 1") return false;
  bool has_key = false, ok_nt = false, ok_nn = false, ok_tn = false;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string field;
    f >> field;
    std::string rest;
    std::getline(f, rest);
    if (!rest.empty() && rest[0] == ' ') rest.erase(0, 1);
    if (field == "key") has_key = rest == key;
    else if (field == "measured") when = rest;
    else if (field == "nt") c.nt = parse_library(rest, ok_nt);
    else if (field == "nn") c.nn = parse_library(rest, ok_nn);
    else if (field == "tn") c.tn = parse_library(rest, ok_tn);
    else if (field == "timing") {
      SgemmTiming t;
      std::istringstream r(rest);
      if (r >> t.layout >> t.m >> t.n >> t.k >> t.openblas_gflops >> t.onednn_gflops) c.timings.push_back(t);
    }
  }
  return has_key && ok_nt && ok_nn && ok_tn;
}

// Publishes `text` as `file` unless a valid one is there already: written aside, then linked into
// place (link fails on an existing name), so the first process's choice is the one every process
// of the machine uses; a file there that holds no choice for the key (damaged, or another key on a
// hash collision) is replaced. Returns false when a valid file was there (or nothing could be written).
bool publish(const std::string& file, const std::string& key, const std::string& text) {
  const std::string dir = file.substr(0, file.rfind('/'));
  for (size_t at = dir.find('/', 1); at != std::string::npos; at = dir.find('/', at + 1)) ::mkdir(dir.substr(0, at).c_str(), 0755);
  ::mkdir(dir.c_str(), 0755);
  const std::string tmp = fmt::format("{}.tmp.{}", file, ::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) return false;
    out << text;
    out.flush();
    if (!out) {
      ::unlink(tmp.c_str());
      return false;
    }
  }
  if (::link(tmp.c_str(), file.c_str()) == 0) {
    ::unlink(tmp.c_str());
    return true;
  }
  SgemmChoice there;
  std::string when;
  if (read_cache(file, key, there, when)) {
    ::unlink(tmp.c_str());
    return false;
  }
  const bool replaced = ::rename(tmp.c_str(), file.c_str()) == 0;
  if (!replaced) ::unlink(tmp.c_str());
  return replaced;
}

std::string now_text() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", std::localtime(&t));
  return buf;
}

SgemmChoice decide() {
  if (const char* e = std::getenv("GRADFLOW_SGEMM"); e && *e && std::string(e) != "auto") {
    bool ok = false;
    const SgemmLibrary lib = parse_library(e, ok);
    GF_CHECK_AS(std::runtime_error, ok, "GRADFLOW_SGEMM must be 'openblas', 'onednn', 'auto' or unset, got '{}'", e);
    SgemmChoice c;
    c.nt = c.nn = c.tn = lib;
    c.source = fmt::format("GRADFLOW_SGEMM={}", e);
    return c;
  }
  const std::string key = cache_key(), file = cache_file(key);
  SgemmChoice cached;
  std::string when;
  if (!file.empty() && read_cache(file, key, cached, when)) {
    cached.source = fmt::format("measured {} on this machine, cached in {}", when, file);
    return cached;
  }
  SgemmChoice c = measure_sgemm_choice();
  when = now_text();
  if (file.empty()) {
    c.source = "measured now (no cache folder: set GRADFLOW_CACHE_DIR or HOME)";
  } else if (publish(file, key, serialise(c, key, when))) {
    c.source = fmt::format("measured {} on this machine, cached in {}", when, file);
  } else if (SgemmChoice first; read_cache(file, key, first, when)) {
    // Another process published first: use its choice, so that both multiply alike.
    first.source = fmt::format("measured {} on this machine, cached in {}", when, file);
    return first;
  } else {
    c.source = fmt::format("measured now (could not write the cache {})", file);
  }
  return c;
}

}  // namespace

const char* sgemm_library_name(SgemmLibrary lib) { return lib == SgemmLibrary::OneDnn ? "onednn" : "openblas"; }

void sgemm_on(SgemmLibrary lib, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
              const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (lib == SgemmLibrary::OpenBlas) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(m), int(n), int(k), alpha, a, int(lda),
                b, int(ldb), beta, c, int(ldc));
    return;
  }
  onednn_thread();
  const dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  GF_CHECK_AS(std::runtime_error, st == dnnl_success, "dnnl_sgemm failed (status {}) on {} x {} x {}", static_cast<int>(st), m, n, k);
}

SgemmChoice measure_sgemm_choice() {
  SgemmChoice c;
  double total[3][2] = {};  // per layout (nt, nn, tn), per library: seconds summed over its shapes
  for (const Shape3& s : kShapes) {
    const int64_t lda = s.ta ? s.m : s.k, ldb = s.tb ? s.k : s.n;
    std::vector<float> a(static_cast<size_t>(s.m * s.k)), b(static_cast<size_t>(s.k * s.n)), out(static_cast<size_t>(s.m * s.n));
    for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i % 17) * 0.0625f - 0.5f;
    for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i % 13) * 0.0625f - 0.375f;
    double best[2] = {1e30, 1e30};
    for (int rep = 0; rep < 4; ++rep)  // the first of each is a warm-up (oneDNN generates its kernel)
      for (int lib = 0; lib < 2; ++lib) {
        const double t = seconds_of([&] {
          sgemm_on(lib ? SgemmLibrary::OneDnn : SgemmLibrary::OpenBlas, s.ta, s.tb, s.m, s.n, s.k, 1.0f, a.data(), lda, b.data(), ldb, 0.0f,
                   out.data(), s.n);
        });
        if (rep > 0) best[lib] = std::min(best[lib], t);
      }
    const double gflop = 2.0 * static_cast<double>(s.m * s.n * s.k) / 1e9;
    c.timings.push_back({s.layout, s.m, s.n, s.k, gflop / best[0], gflop / best[1]});
    const int l = s.layout[0] == 't' ? 2 : s.layout[1] == 't' ? 0 : 1;
    total[l][0] += best[0], total[l][1] += best[1];
  }
  // oneDNN only where it is clearly faster (5%) on that layout's shapes together: on a tie the
  // library the rest of gradflow uses.
  auto pick = [&](int l) { return total[l][1] < 0.95 * total[l][0] ? SgemmLibrary::OneDnn : SgemmLibrary::OpenBlas; };
  c.nt = pick(0), c.nn = pick(1), c.tn = pick(2);
  c.source = "measured now";
  return c;
}

const SgemmChoice& sgemm_choice() {
  static const SgemmChoice choice = decide();
  return choice;
}

SgemmLibrary sgemm_library_for(bool ta, bool tb) {
  const SgemmChoice& c = sgemm_choice();
  if (!ta && tb) return c.nt;
  if (!ta && !tb) return c.nn;
  if (ta && !tb) return c.tn;
  return SgemmLibrary::OpenBlas;
}

}  // namespace gf::kernels
