#include "shardtrain/runtime/mpi_env.h"

#include <cstdio>
#include <cstdlib>

#include "shardtrain/runtime/error.h"
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
  set_ranks_per_node(0);
}

void MpiEnv::set_ranks_per_node(int ranks_per_node) {
  if (ranks_per_node > 0) {
    topo_ = topology_from_ranks_per_node(topo_.rank, topo_.world, ranks_per_node);
    return;
  }
  MPI_Comm raw = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, topo_.rank, MPI_INFO_NULL, &raw));
  MpiComm local(raw);
  topo_.local_rank = local.rank();
  topo_.local_size = local.size();
  // Node index = rank of this node's leader among all leaders, shared with the node.
  MPI_Comm leaders_raw = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, topo_.local_rank == 0 ? 0 : MPI_UNDEFINED, topo_.rank,
                           &leaders_raw));
  MpiComm leaders(leaders_raw);
  int node = 0, nodes = 0;
  if (topo_.local_rank == 0) {
    node = leaders.rank();
    nodes = leaders.size();
  }
  int buf[2] = {node, nodes};
  MPI_CHECK(MPI_Bcast(buf, 2, MPI_INT, 0, local.get()));
  topo_.node = buf[0];
  topo_.num_nodes = buf[1];
}

MpiEnv::~MpiEnv() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (owns_ && !finalized) MPI_Finalize();
}

void MpiEnv::abort(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  int world = 1;
  if (inited && !finalized) MPI_Comm_size(MPI_COMM_WORLD, &world);
  // A lone rank exits normally so the exit code (2 for usage errors) survives.
  if (inited && !finalized && world > 1) MPI_Abort(MPI_COMM_WORLD, code);
  if (inited && !finalized) MPI_Finalize();
  std::exit(code);
}

}  // namespace shardtrain::runtime
