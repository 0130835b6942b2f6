#include "shardtrain/comm/collective_sweep.h"

#include <ATen/ATen.h>
#include <mpi.h>

#include "shardtrain/comm/bus_bandwidth.h"
#include "shardtrain/comm/mpi_communicator.h"
#include "shardtrain/runtime/error.h"
#ifdef SHARDTRAIN_HAVE_CUDA
#include "shardtrain/comm/nccl_communicator.h"
#include "shardtrain/cuda/cuda_handles.h"
#endif

namespace shardtrain::comm {
namespace {

void sync_device(bool use_cuda) {
#ifdef SHARDTRAIN_HAVE_CUDA
  if (use_cuda) cuda::device_synchronize();
#endif
  (void)use_cuda;
}

}  // namespace

Scope make_scope(const std::string& name, int color, int key, bool use_cuda) {
  MPI_Comm c;
  MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, color, key, &c));
  MPI_Comm dup;  // the backend gets its own communicator; the scope's carries the timing reductions
  MPI_CHECK(MPI_Comm_dup(c, &dup));
  Scope s{name, runtime::MpiComm(c), nullptr};
#ifdef SHARDTRAIN_HAVE_CUDA
  if (use_cuda)
    s.comm = std::make_unique<NcclCommunicator>(runtime::MpiComm(dup), name,
                                                cuda::NcclComm::bootstrap(dup));
#endif
  if (!s.comm) s.comm = std::make_unique<MpiCommunicator>(runtime::MpiComm(dup), name);
  return s;
}

Op op_of(const std::string& name) {
  return name == "all_gather"       ? Op::kAllGather
         : name == "reduce_scatter" ? Op::kReduceScatter
                                    : Op::kAllReduce;
}

// Times one collective of `bytes` on the scope; every group of the scope runs at once.
SweepRow measure(Scope& s, Op op, int64_t bytes, int warmup, int iters,
                 const at::TensorOptions& opt, bool use_cuda) {
  auto& c = *s.comm;
  const int n = c.size(), r = c.rank();
  SweepRow row;
  row.count = sweep_elements(bytes, 4, n);
  row.bytes = row.count * 4;
  const int64_t per = row.count / n;
  at::Tensor in =
      at::full({op == Op::kAllGather ? per : row.count}, static_cast<double>(r + 1), opt);
  at::Tensor out = at::empty({op == Op::kAllGather ? row.count : per}, opt);
  auto run = [&] {
    if (op == Op::kAllGather)
      c.all_gather_async(in, out)->wait();
    else if (op == Op::kReduceScatter)
      c.reduce_scatter_async(in, out)->wait();
    else
      c.all_reduce_async(in)->wait();
  };
  for (int i = 0; i < warmup; ++i) run();
  sync_device(use_cuda);
  MPI_CHECK(MPI_Barrier(s.mpi.get()));
  const double t0 = MPI_Wtime();
  for (int i = 0; i < iters; ++i) run();
  sync_device(use_cuda);
  // The slowest group sets the row: a bad node shows up as the scope's bandwidth.
  struct {
    double secs;
    int rank;
  } mine{(MPI_Wtime() - t0) / iters, 0}, slowest{};
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &mine.rank));
  MPI_CHECK(MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE_INT, MPI_MAXLOC, MPI_COMM_WORLD));
  // Correctness on a fresh input (all-reduce works in place, so the timed runs changed it).
  in.fill_(static_cast<double>(r + 1));
  run();
  at::Tensor expect;
  if (op == Op::kAllGather)
    expect = at::arange(1, n + 1, opt).repeat_interleave(per);
  else
    expect = at::full({op == Op::kReduceScatter ? per : row.count}, n * (n + 1) / 2.0, opt);
  row.wrong = (op == Op::kAllReduce ? in : out).ne(expect).sum().item<int64_t>();
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &row.wrong, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD));
  row.seconds = slowest.secs;
  row.slowest_rank = slowest.rank;
  row.algbw = row.bytes / row.seconds / 1e9;
  row.busbw = row.algbw * bus_factor(op, n);
  return row;
}

}  // namespace shardtrain::comm
