// The NCCL backend behind the same Communicator interface, for CUDA tensors. Collectives run on
// the communicator's own stream: it first waits for the compute stream (the producer), and
// Work::wait() makes the compute stream wait for the collective, so the host never blocks.
// Compiled whenever nvcc and nccl.h are found; the GPU issue wires it into training.
#pragma once
#include <cuda_runtime.h>

#include <array>
#include <string>

#include "shardtrain/comm/communicator.h"
#include "shardtrain/comm/process_groups.h"
#include "shardtrain/cuda/cuda_handles.h"
#include "shardtrain/cuda/nccl_comm.h"
#include "shardtrain/runtime/mpi_env.h"

namespace shardtrain::comm {

class NcclCommunicator : public Communicator {
 public:
  // Bootstraps NCCL over `group` (collective over it). compute: the stream that produces inputs
  // and consumes outputs; LibTorch's default current stream is the legacy stream (nullptr).
  NcclCommunicator(MpiComm group, std::string name, cudaStream_t compute = nullptr);
  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.size(); }

  WorkPtr all_gather_async(const at::Tensor& in, const at::Tensor& out) override;
  WorkPtr reduce_scatter_async(const at::Tensor& in, const at::Tensor& out) override;
  WorkPtr all_reduce_async(const at::Tensor& t) override;
  WorkPtr broadcast_async(const at::Tensor& t, int root) override;
  void barrier() override;

  MPI_Comm mpi() const override { return mpi_.get(); }
  at::Device device() const override { return device_; }
  cudaStream_t stream() const { return stream_.get(); }
  ncclComm_t nccl() const { return comm_.get(); }

 private:
  cudaStream_t begin();                                   // comm stream waits for compute
  WorkPtr finish(Op op, int64_t bytes, std::vector<at::Tensor> keep);  // event the compute stream waits on
  MpiComm mpi_;
  cuda::NcclComm comm_;
  cuda::Stream stream_;
  cudaStream_t compute_;
  at::Device device_;                       // the current device when the communicator was made
  cuda::Event produced_;                    // compute -> comm stream ordering, reused per collective
  std::array<std::string, kNumOps> nvtx_;   // "all_gather shard", ... built once
};

// The world, shard and replicate groups as NCCL communicators: MPI_Comm_split makes each group,
// then rank 0 of each broadcasts its ncclUniqueId over that group's MPI communicator. A watchdog
// thread polls every communicator's async error and aborts the job naming rank and host.
ProcessGroups make_nccl_groups(const GroupLayout& layout, const Topology& topo, const std::string& host);

}  // namespace shardtrain::comm
