// The NCCL backend behind the same Communicator interface, for CUDA tensors. All-gathers (and
// broadcasts) run on one NCCL communicator and stream, reduce-scatters and all-reduces on a
// second one split from it over the same ranks, so a prefetch never queues behind a gradient
// reduction. Each collective first waits for the caller's current CUDA stream (the producer),
// and Work::wait() makes the then-current stream wait for it, so the host never blocks. A Work
// dropped without wait() keeps its buffers until its collective has completed on the device.
#pragma once
#include <cuda_runtime.h>

#include <array>
#include <memory>
#include <string>

#include "shardtrain/comm/communicator.h"
#include "shardtrain/comm/parallel_dims.h"
#include "shardtrain/cuda/cuda_handles.h"
#include "shardtrain/cuda/nccl_comm.h"
#include "shardtrain/runtime/mpi_env.h"

namespace shardtrain::comm {

class NcclCommunicator : public Communicator {
 public:
  // comm: NCCL over the same ranks as `group` (bootstrapped over it, or split from a parent).
  // Collective over the group: splits the reduction communicator from comm.
  NcclCommunicator(runtime::MpiComm group, std::string name, cuda::NcclComm comm);

  WorkPtr all_gather_async(const at::Tensor& in, const at::Tensor& out) override;
  WorkPtr reduce_scatter_async(const at::Tensor& in, const at::Tensor& out) override;
  WorkPtr all_reduce_async(const at::Tensor& t) override;
  WorkPtr all_reduce_after_async(const at::Tensor& t, Work& prior) override;
  WorkPtr broadcast_async(const at::Tensor& t, int root) override;
  void barrier() override;
  WorkPtr send_recv_async(const at::Tensor& send, int dst, const at::Tensor& recv,
                          int src) override;
  WorkPtr all_to_all_async(const at::Tensor& send, const std::vector<int64_t>& send_rows,
                           const at::Tensor& recv, const std::vector<int64_t>& recv_rows) override;

  MPI_Comm mpi() const override { return mpi_.get(); }
  at::Device device() const override { return device_; }
  void bind_thread() const override;
  std::vector<std::function<double()>> take_device_waits() override;
  int rank() const override { return gather_.comm.rank(); }
  int size() const override { return gather_.comm.size(); }
  ncclComm_t nccl() const { return gather_.comm.get(); }
  ncclComm_t nccl_reduce() const { return reduce_.comm.get(); }
  // Collective over this communicator's ranks: a new one over those passing the same color.
  cuda::NcclComm split(int color, int key) const {
    return cuda::NcclComm::split(gather_.comm, color, key);
  }
  class Shelf;   // buffers of collectives dropped unwaited, kept until they complete
  class Stalls;  // the compute stream's waits on collectives, as (arrival, done) event pairs

 private:
  struct Lane {  // one NCCL communicator and the stream its collectives run on
    cuda::NcclComm comm;
    cuda::Stream stream;
    cuda::Event produced;  // caller's stream -> this stream, reused per collective
  };
  Lane& lane(Op op) { return op == Op::kReduceScatter || op == Op::kAllReduce ? reduce_ : gather_; }
  cudaStream_t begin(Lane& l);  // the lane's stream waits for the caller's current stream
  WorkPtr finish(Lane& l, Op op, int64_t bytes, std::vector<at::Tensor> keep);
  runtime::MpiComm mpi_;
  at::Device device_;  // the current device when the communicator was made
  Lane gather_, reduce_;
  std::array<std::string, kNumOps> nvtx_;  // "all_gather shard", ... built once
  std::shared_ptr<Shelf> shelf_;           // shared with its works, which may outlive it
  std::shared_ptr<Stalls> stalls_;         // likewise
};

// The world, shard and replicate groups as NCCL communicators: MPI_Comm_split makes each group,
// then rank 0 of each broadcasts its ncclUniqueId over that group's MPI communicator. A watchdog
// thread polls every communicator's async error and aborts the job naming rank and host.
ParallelDims make_nccl_groups(const GroupLayout& layout, const runtime::Topology& topo,
                              const std::string& host);

}  // namespace shardtrain::comm
