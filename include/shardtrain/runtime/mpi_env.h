// MPI is the only bootstrap: rank, local rank and node come from MPI_Comm_split_type, or from
// --ranks-per-node when one machine should act as several nodes.
#pragma once
#include <mpi.h>

#include <functional>
#include <string>

namespace shardtrain::runtime {

// Move-only owner of an MPI communicator (never frees MPI_COMM_WORLD/SELF/NULL).
class MpiComm {
 public:
  MpiComm() = default;
  explicit MpiComm(MPI_Comm c) : comm_(c) {}
  MpiComm(MpiComm&& o) noexcept : comm_(o.comm_) { o.comm_ = MPI_COMM_NULL; }
  MpiComm& operator=(MpiComm&& o) noexcept;
  MpiComm(const MpiComm&) = delete;
  MpiComm& operator=(const MpiComm&) = delete;
  ~MpiComm();
  static MpiComm dup(MPI_Comm c = MPI_COMM_WORLD);  // a private channel over the same ranks
  MPI_Comm get() const { return comm_; }
  int rank() const;
  int size() const;

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
};

// Where a rank sits: a pure function of (rank, world, ranks per node) once K is known.
struct Topology {
  int rank = 0, world = 1;
  int local_rank = 0, local_size = 1;
  int node = 0, num_nodes = 1;
};
// Throws UsageError when world is not a multiple of ranks_per_node.
Topology topology_from_ranks_per_node(int rank, int world, int ranks_per_node);

class MpiEnv {
 public:
  // Initializes MPI (thread-multiple when available) unless it already is.
  MpiEnv(int* argc, char*** argv);
  ~MpiEnv();
  MpiEnv(const MpiEnv&) = delete;
  MpiEnv& operator=(const MpiEnv&) = delete;

  // ranks_per_node <= 0 means: ask MPI which ranks share memory. Only the process groups follow
  // it: devices and other per-machine resources follow machine().
  void set_ranks_per_node(int ranks_per_node);
  const Topology& topology() const { return topo_; }
  // The real layout (MPI_COMM_TYPE_SHARED), whatever --ranks-per-node simulates: which ranks
  // share this machine's GPUs and cores.
  const Topology& machine() const { return machine_; }
  int rank() const { return topo_.rank; }
  int size() const { return topo_.world; }
  const std::string& host() const { return host_; }
  int thread_level() const { return thread_level_; }

  // Tears the whole job down so that no rank waits on one that failed.
  [[noreturn]] static void abort(int code);
  // Every rank calls it with the same code (an agreed error): the job ends without MPI_Abort, so
  // that the one error line is not followed by Open MPI's abort banner.
  [[noreturn]] static void exit_together(int code);
  // The same from a helper thread (a watchdog): never finalizes MPI or runs exit handlers under
  // the main thread, which may be inside MPI, CUDA or LibTorch.
  [[noreturn]] static void abort_from_thread(int code);

 private:
  Topology topo_;
  Topology machine_;
  std::string host_;
  int thread_level_ = 0;
  bool owns_ = false;
};

// The one line a helper thread prints when its own work fails: "shardtrain: fatal: <thread> on
// rank R (host): <error>. Exiting with code C." (line breaks in error become "; ").
std::string helper_thread_failure(const std::string& thread, int rank, const std::string& host,
                                  const std::string& error, int exit_code);
// Runs a helper thread's body. An exception escaping it would std::terminate the process (no
// message, no exit code): it is printed as helper_thread_failure on stderr instead, then
// end(exit_code) runs, MpiEnv::abort_from_thread unless a test passes another.
void run_helper_thread(
    const std::string& thread, int rank, const std::string& host, int exit_code,
    const std::function<void()>& body,
    const std::function<void(int)>& end = [](int code) { MpiEnv::abort_from_thread(code); });

}  // namespace shardtrain::runtime
