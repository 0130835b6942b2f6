#include "shardtrain/runtime/mpi_env.h"

#include <c10/util/Exception.h>

#include <cstdio>
#include <cstdlib>

#include "shardtrain/runtime/error.h"
#include "shardtrain/runtime/fast_exit.h"
#include "shardtrain/runtime/logging.h"

namespace shardtrain::runtime {

MpiComm& MpiComm::operator=(MpiComm&& o) noexcept {
  if (this != &o) {
    MpiComm dead(comm_);
    comm_ = o.comm_;
    o.comm_ = MPI_COMM_NULL;
  }
  return *this;
}

MpiComm::~MpiComm() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_NULL && comm_ != MPI_COMM_WORLD && comm_ != MPI_COMM_SELF)
    MPI_Comm_free(&comm_);
}

MpiComm MpiComm::dup(MPI_Comm c) {
  MPI_Comm d;
  MPI_CHECK(MPI_Comm_dup(c, &d));
  return MpiComm(d);
}

int MpiComm::rank() const {
  int r = 0;
  MPI_CHECK(MPI_Comm_rank(comm_, &r));
  return r;
}

int MpiComm::size() const {
  int s = 0;
  MPI_CHECK(MPI_Comm_size(comm_, &s));
  return s;
}

Topology topology_from_ranks_per_node(int rank, int world, int ranks_per_node) {
  if (ranks_per_node <= 0 || world % ranks_per_node != 0)
    throw UsageError("--ranks-per-node " + std::to_string(ranks_per_node) +
                     " must be positive and divide the world size " + std::to_string(world));
  Topology t;
  t.rank = rank;
  t.world = world;
  t.local_size = ranks_per_node;
  t.local_rank = rank % ranks_per_node;
  t.node = rank / ranks_per_node;
  t.num_nodes = world / ranks_per_node;
  return t;
}

namespace {
// Collective over the world: which ranks share memory with this one, and the node's index.
Topology machine_topology(int rank, int world) {
  Topology t;
  t.rank = rank;
  t.world = world;
  MPI_Comm raw = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &raw));
  MpiComm local(raw);
  t.local_rank = local.rank();
  t.local_size = local.size();
  // Node index = rank of this node's leader among all leaders, shared with the node.
  MPI_Comm leaders_raw = MPI_COMM_NULL;
  MPI_CHECK(
      MPI_Comm_split(MPI_COMM_WORLD, t.local_rank == 0 ? 0 : MPI_UNDEFINED, rank, &leaders_raw));
  MpiComm leaders(leaders_raw);
  int buf[2] = {0, 0};
  if (t.local_rank == 0) {
    buf[0] = leaders.rank();
    buf[1] = leaders.size();
  }
  MPI_CHECK(MPI_Bcast(buf, 2, MPI_INT, 0, local.get()));
  t.node = buf[0];
  t.num_nodes = buf[1];
  return t;
}
}  // namespace

MpiEnv::MpiEnv(int* argc, char*** argv) {
  int inited = 0;
  MPI_CHECK(MPI_Initialized(&inited));
  if (!inited) {
    // Open MPI's MPI-IO (OMPIO) aggregates collective writes in 32 MiB pieces by default. Pieces
    // of one 1 MiB stripe (the Lustre default, and ROMIO's cb_buffer_size hint we pass) saved 2-4x
    // faster here (docs/checkpoint-format.md). A value the user exported wins.
    setenv("OMPI_MCA_io_ompio_bytes_per_agg", "1048576", /*overwrite=*/0);
    setenv("OMPI_MCA_io_ompio_cycle_buffer_size", "1048576", 0);
    MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &thread_level_));
    owns_ = true;
  } else {
    MPI_CHECK(MPI_Query_thread(&thread_level_));
  }
  // Errors come back as codes so MPI_CHECK can report them with rank and host.
  MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  char name[MPI_MAX_PROCESSOR_NAME] = {0};
  int len = 0;
  MPI_CHECK(MPI_Get_processor_name(name, &len));
  host_.assign(name, static_cast<size_t>(len));
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &topo_.rank));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &topo_.world));
  detail::set_identity(topo_.rank, host_);
  log::set_rank(topo_.rank);
  machine_ = machine_topology(topo_.rank, topo_.world);
  topo_ = machine_;
}

void MpiEnv::set_ranks_per_node(int ranks_per_node) {
  topo_ = ranks_per_node > 0 ? topology_from_ranks_per_node(topo_.rank, topo_.world, ranks_per_node)
                             : machine_;
}

MpiEnv::~MpiEnv() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (owns_ && !finalized) MPI_Finalize();
}

namespace {
// Flushes what this process printed; true while MPI is initialized and not finalized.
bool flush_and_mpi_live() {
  std::fflush(stdout);
  std::fflush(stderr);
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  return inited && !finalized;
}

// With other ranks alive takes the job down with `code`; true when MPI is still live.
bool abort_other_ranks(int code) {
  const bool live = flush_and_mpi_live();
  int world = 1;
  if (live) MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (live && world > 1) MPI_Abort(MPI_COMM_WORLD, code);
  return live;
}
}  // namespace

void MpiEnv::abort(int code) {
  // A lone rank exits normally so the exit code (2 for usage errors) survives.
  if (abort_other_ranks(code)) MPI_Finalize();
  fast_exit(code);
}

void MpiEnv::exit_together(int code) {
  if (flush_and_mpi_live()) {
    MPI_Barrier(MPI_COMM_WORLD);  // the error line is out before any rank's exit ends the job
    MPI_Finalize();
  }
  fast_exit(code);
}

void MpiEnv::abort_from_thread(int code) {
  abort_other_ranks(code);
  // A lone rank: _Exit keeps the code and skips the static destructors the main thread still uses.
  std::_Exit(code);
}

std::string helper_thread_failure(const std::string& thread, int rank, const std::string& host,
                                  const std::string& error, int exit_code) {
  std::string what;
  for (char c : error) {
    if (c == '\r') continue;
    if (c == '\n')
      what += "; ";
    else
      what += c;
  }
  while (!what.empty() && (what.back() == ' ' || what.back() == ';' || what.back() == '.'))
    what.pop_back();
  return "shardtrain: fatal: " + thread + " on rank " + std::to_string(rank) + " (" + host +
         "): " + what + ". Exiting with code " + std::to_string(exit_code) + ".";
}

void run_helper_thread(const std::string& thread, int rank, const std::string& host, int exit_code,
                       const std::function<void()>& body, const std::function<void(int)>& end) {
  std::string error;
  try {
    body();
    return;
  } catch (const c10::Error& e) {
    error = e.what_without_backtrace();  // LibTorch's what() appends a multi-line backtrace
  } catch (const std::exception& e) {
    error = e.what();
  } catch (...) {
    error = "an unknown exception";
  }
  std::fprintf(stderr, "%s\n", helper_thread_failure(thread, rank, host, error, exit_code).c_str());
  std::fflush(stderr);
  end(exit_code);
}

}  // namespace shardtrain::runtime
