#include "train/distributed/comm.h"

#include <fmt/core.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "tensor/check.h"

#ifdef GRADFLOW_HAVE_MPI
#define OMPI_SKIP_MPICXX 1  // the C API only: the deprecated C++ bindings warn under -Wextra
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace gf::train::distributed {
namespace {

World g_world;
bool g_started = false;  // MPI_Init done (and MPI_Finalize not yet)

int env_int(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : 0;
}

// Set by every launcher that starts MPI processes, also for a single process.
bool launched_by_mpi() { return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") || std::getenv("PMIX_RANK"); }

int cores_allowed() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

#ifdef GRADFLOW_HAVE_MPI
// MPI counts are int: large buffers go in pieces.
constexpr size_t kMaxCount = size_t{1} << 30;

template <class T>
void allreduce(std::span<T> v, MPI_Datatype type, MPI_Op op) {
  if (!g_started || g_world.size == 1) return;
  for (size_t at = 0; at < v.size(); at += kMaxCount)
    MPI_Allreduce(MPI_IN_PLACE, v.data() + at, static_cast<int>(std::min(kMaxCount, v.size() - at)), type, op, MPI_COMM_WORLD);
}
#endif

}  // namespace

bool built_with_mpi() {
#ifdef GRADFLOW_HAVE_MPI
  return true;
#else
  return false;
#endif
}

std::string mpi_library() {
#ifdef GRADFLOW_HAVE_MPI
  char text[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(text, &len);
  std::string s(text, static_cast<size_t>(len));
  return s.substr(0, s.find_first_of(",\n"));  // "Open MPI v4.1.4, package: ..." -> "Open MPI v4.1.4"
#else
  return "";
#endif
}

int launched_processes() {
  if (const int n = env_int("OMPI_COMM_WORLD_SIZE")) return n;
  if (const int n = env_int("PMI_SIZE")) return n;
  if (const int n = env_int("SLURM_STEP_NUM_TASKS"); n > 0 && std::getenv("PMIX_RANK")) return n;
  return 1;
}

void start() {
  if (g_started || !launched_by_mpi()) return;
#ifdef GRADFLOW_HAVE_MPI
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);  // only the main thread calls MPI
  g_started = true;
  MPI_Comm_rank(MPI_COMM_WORLD, &g_world.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_world.size);
  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g_world.rank, MPI_INFO_NULL, &local);
  MPI_Comm_rank(local, &g_world.local_rank);
  MPI_Comm_size(local, &g_world.local_size);
  MPI_Comm_free(&local);
#else
  const int n = launched_processes();
  GF_CHECK_AS(std::runtime_error, n <= 1,
              "gradflow was built without MPI, so it cannot train as one job of {} processes (launched by mpirun or srun); each "
              "would train alone. Install libopenmpi-dev and openmpi-bin (scripts/setup.sh does) and rebuild, or run one process.",
              n);
#endif
}

bool running() { return g_started; }

const World& world() { return g_world; }

int default_threads() {
  const int hardware = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  // Bound to a few cores by the launcher (mpirun binds each of up to 2 ranks to a core): those.
  // Unbound: an equal share of the machine among its processes.
  return std::max(1, std::min(cores_allowed(), hardware / std::max(1, g_world.local_size)));
}

void allreduce_sum(std::span<float> v) {
#ifdef GRADFLOW_HAVE_MPI
  allreduce(v, MPI_FLOAT, MPI_SUM);
#endif
}

namespace {

// One agreement's message: [tag, -tag, combine, values...]. Reduced with max on the first three
// (so every process learns the largest and the smallest tag) and `combine` on the values.
constexpr int kAgreementMessage = 3 + static_cast<int>(kAgreementValues);

#ifdef GRADFLOW_HAVE_MPI
void combine_agreements(void* in, void* inout, int* len, MPI_Datatype*) {
  const double* a = static_cast<const double*>(in);
  double* b = static_cast<double*>(inout);
  for (int m = 0; m + kAgreementMessage <= *len; m += kAgreementMessage) {
    const bool sum = a[m + 2] == static_cast<double>(Combine::Sum) && b[m + 2] == static_cast<double>(Combine::Sum);
    for (int i = m; i < m + 3; ++i) b[i] = std::max(a[i], b[i]);
    for (int i = m + 3; i < m + kAgreementMessage; ++i) b[i] = sum ? a[i] + b[i] : std::max(a[i], b[i]);
  }
}

MPI_Op agreement_op() {
  static MPI_Op op = [] {
    MPI_Op o;
    MPI_Op_create(combine_agreements, 1, &o);  // commutative, as sum and max are
    return o;
  }();
  return op;
}
#endif

}  // namespace

std::string agreement_name(Agreement tag) {
  switch (tag) {
    case Agreement::StopVote: return "the stop vote";
    case Agreement::StepLoss: return "the step's loss";
    case Agreement::Validation: return "the validation sums";
    case Agreement::SetupDigest: return "the setup digest";
    case Agreement::Replicas: return "the replica check";
    case Agreement::Anomaly: return "the anomaly reports";
  }
  return fmt::format("agreement {}", static_cast<int>(tag));
}

void agree(Agreement tag, Combine how, std::span<double> values) {
  GF_CHECK_AS(std::logic_error, values.size() <= kAgreementValues, "agree({}): {} values, at most {}", agreement_name(tag), values.size(),
              kAgreementValues);
#ifdef GRADFLOW_HAVE_MPI
  if (!g_started || g_world.size == 1) return;
  double m[kAgreementMessage] = {};
  m[0] = static_cast<double>(tag);
  m[1] = -static_cast<double>(tag);
  m[2] = static_cast<double>(how);
  std::copy(values.begin(), values.end(), m + 3);
  MPI_Allreduce(MPI_IN_PLACE, m, kAgreementMessage, MPI_DOUBLE, agreement_op(), MPI_COMM_WORLD);
  const int highest = static_cast<int>(m[0]), lowest = static_cast<int>(-m[1]);
  GF_CHECK_AS(std::logic_error, highest == lowest, "rank {}: two different agreements met in one collective: {} and {} (a process is out of step)",
              g_world.rank, agreement_name(static_cast<Agreement>(lowest)), agreement_name(static_cast<Agreement>(highest)));
  std::copy(m + 3, m + 3 + values.size(), values.begin());
#endif
}

void broadcast_bytes(void* data, size_t bytes) {
#ifdef GRADFLOW_HAVE_MPI
  if (!g_started || g_world.size == 1) return;
  char* p = static_cast<char*>(data);
  for (size_t at = 0; at < bytes; at += kMaxCount)
    MPI_Bcast(p + at, static_cast<int>(std::min(kMaxCount, bytes - at)), MPI_BYTE, 0, MPI_COMM_WORLD);
#endif
}

void broadcast(std::string& text) {
  if (!several()) return;
  unsigned long long n = text.size();
  broadcast_bytes(&n, sizeof n);
  text.resize(n);
  broadcast_bytes(text.data(), n);
}

std::vector<std::string> gather(const std::string& text) {
  if (!several()) return {text};
#ifdef GRADFLOW_HAVE_MPI
  int n = static_cast<int>(text.size());
  std::vector<int> sizes(is_root() ? g_world.size : 0), offsets(sizes.size());
  MPI_Gather(&n, 1, MPI_INT, sizes.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  int total = 0;
  for (size_t r = 0; r < sizes.size(); ++r) offsets[r] = total, total += sizes[r];
  std::string all(static_cast<size_t>(total), '\0');
  MPI_Gatherv(text.data(), n, MPI_CHAR, all.data(), sizes.data(), offsets.data(), MPI_CHAR, 0, MPI_COMM_WORLD);
  std::vector<std::string> out;
  for (size_t r = 0; r < sizes.size(); ++r) out.push_back(all.substr(static_cast<size_t>(offsets[r]), static_cast<size_t>(sizes[r])));
  return out;
#else
  return {text};
#endif
}

void quiet_barrier() {
#ifdef GRADFLOW_HAVE_MPI
  if (!g_started || g_world.size == 1) return;
  MPI_Request request;
  MPI_Ibarrier(MPI_COMM_WORLD, &request);
  for (int done = 0;;) {
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (done) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
#endif
}

void finalize() {
#ifdef GRADFLOW_HAVE_MPI
  if (!g_started) return;
  quiet_barrier();
  MPI_Finalize();
  g_started = false;
#endif
}

void abort_job(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
#ifdef GRADFLOW_HAVE_MPI
  if (g_started) MPI_Abort(MPI_COMM_WORLD, code);
#endif
  std::_Exit(code);
}

std::string rank_prefix() { return several() ? fmt::format("rank {} of {}: ", g_world.rank, g_world.size) : ""; }

}  // namespace gf::train::distributed
