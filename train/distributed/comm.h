#pragma once
// The processes of a data-parallel training run and the few collectives training needs, over
// MPI (Open MPI). MPI is started only when an MPI launcher started gradflow (mpirun, mpiexec,
// srun); otherwise, and when gradflow was built without MPI, there is one process and every
// collective leaves its data as it is, so the trainer has a single code path.
//
// Errors: a process that fails alone must end the whole job (abort_job: MPI_Abort), or the others
// would wait for it in the next collective forever. A stop that every process decided together,
// from values they all hold after an allreduce (a NaN gradient, a signal), ends normally
// (finalize) and is reported once, by rank 0: such errors are thrown as AgreedError.
#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace gf::train::distributed {

// Whether gradflow was built with MPI, and the library's own description ("" without).
bool built_with_mpi();
std::string mpi_library();

// The number of processes the launcher started, read from its environment (Open MPI:
// OMPI_COMM_WORLD_SIZE; PMI-2: PMI_SIZE; PMIx under Slurm: SLURM_STEP_NUM_TASKS); 1 without one.
int launched_processes();

// Starts MPI when a launcher started this process (idempotent). Throws std::runtime_error
// "gradflow was built without MPI" when several processes were launched and MPI is not built in.
void start();

// Whether MPI was started (a launcher started this process, perhaps as the only one).
bool running();

struct World {
  int rank = 0, size = 1;              // in the job
  int local_rank = 0, local_size = 1;  // among the processes on this machine (MPI_COMM_TYPE_SHARED)
};
const World& world();
inline bool is_root() { return world().rank == 0; }
inline bool several() { return world().size > 1; }

// Threads per process when --threads is not given: the cores this process may run on, shared
// with the other processes on its machine unless the launcher already bound each to its own cores.
int default_threads();

// The small agreements of a run: a few numbers every process contributes, combined element-wise
// (summed, or the maximum taken), the result on every process. Each carries a tag naming the
// agreement, in the same message as its values: should two processes ever call different
// agreements at the same point (a bug: one process skipped or added a collective), they would
// pair up in one MPI_Allreduce, and that call itself finds the two tags and throws std::logic_error
// naming both, on every process, instead of mixing a signal vote with a loss. Every message has the
// same fixed size, so two different agreements never make MPI's counts disagree either.
enum class Agreement : int {
  StopVote = 1,     // before each step: a signal, the time budget
  StepLoss = 2,     // after each step's backward: the global batch's loss
  Validation = 3,   // each epoch: the validation NLL and token sums
  SetupDigest = 4,  // at the start: what every process built (train/distributed/replicas.h)
  Replicas = 5,     // each epoch: a digest of the weights and optimizer state
  Anomaly = 6,      // a NaN step: whether any process has an anomaly report
};
enum class Combine : int { Sum = 0, Max = 1 };
constexpr size_t kAgreementValues = 24;  // at most this many values in one agreement
// In place; values.size() <= kAgreementValues (std::logic_error otherwise). One process: unchanged.
void agree(Agreement tag, Combine how, std::span<double> values);
std::string agreement_name(Agreement tag);

// The large transfers below pair up by their fixed order: every process makes the same calls in
// the same sequence between two agreements (the gradient buckets after each backward, the
// weights and optimizer state after setup and after a replica check finds a difference).
// Element-wise sum over every process, in place; every process gets the same result.
void allreduce_sum(std::span<float> values);
// Rank 0's bytes to every process (sizes must match on every process).
void broadcast_bytes(void* data, size_t bytes);
// Rank 0's string to every process.
void broadcast(std::string& text);
// Every process's string, on rank 0 (in rank order); other ranks get an empty list.
std::vector<std::string> gather(const std::string& text);
// Waits until every process has arrived, sleeping in between polls: a process waiting while rank
// 0 writes a checkpoint must not take a core from it (MPI's blocking calls spin).
void quiet_barrier();

// The end of a job every process reached alike: waits for the others, then MPI_Finalize.
void finalize();
// Ends every process of the job with this exit code (MPI_Abort); without MPI, exits this one.
[[noreturn]] void abort_job(int code);

// "rank 1 of 4: " with several processes, else "".
std::string rank_prefix();

// An error every process raised at the same point, from values they agreed on.
struct AgreedError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace gf::train::distributed
