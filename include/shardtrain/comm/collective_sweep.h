// A collective bandwidth sweep, as nccl-tests runs one: a group of ranks (a scope), each
// collective timed at one size with every group of the scope at once, the slowest group's
// algbw/busbw and a correctness check. `shardtrain preflight` prints the rows.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>

#include "shardtrain/comm/communicator.h"
#include "shardtrain/runtime/mpi_env.h"

namespace shardtrain::comm {

// A group of ranks to sweep: the MPI communicator, and the backend's communicator over it.
struct Scope {
  std::string name;
  runtime::MpiComm mpi;
  std::unique_ptr<comm::Communicator> comm;
};

// The ranks of MPI_COMM_WORLD with this color, ordered by key, over NCCL (use_cuda) or MPI.
Scope make_scope(const std::string& name, int color, int key, bool use_cuda);
// all_gather, reduce_scatter or all_reduce.
Op op_of(const std::string& name);

struct SweepRow {
  int64_t bytes = 0, count = 0;
  double seconds = 0, algbw = 0, busbw = 0;  // of the slowest group
  int64_t wrong = 0;
  int slowest_rank = 0;
};

// Times one collective of `bytes` on the scope (warmup runs, then iters timed), every group of the
// scope at once; collective over the world.
SweepRow measure(Scope& s, Op op, int64_t bytes, int warmup, int iters,
                 const at::TensorOptions& opt, bool use_cuda);

}  // namespace shardtrain::comm
