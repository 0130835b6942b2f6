// The NCCL backend behind the same Communicator interface, for CUDA tensors. Collectives run on
// the communicator's own stream: it first waits for the compute stream (the producer), and
// Work::wait() makes the compute stream wait for the collective, so the host never blocks.
// Compiled whenever nvcc and nccl.h are found; the GPU issue wires it into training.
#pragma once
#include <cuda_runtime.h>

#include "shardtrain/comm/communicator.h"
#include "shardtrain/cuda/cuda_handles.h"
#include "shardtrain/cuda/nccl_comm.h"

namespace shardtrain::comm {

class NcclCommunicator : public Communicator {
 public:
  // compute: the stream that produces inputs and consumes outputs (LibTorch's current stream).
  NcclCommunicator(cuda::NcclComm comm, std::string name, cudaStream_t compute = nullptr);
  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.size(); }

  WorkPtr all_gather_async(const at::Tensor& in, const at::Tensor& out) override;
  WorkPtr reduce_scatter_async(const at::Tensor& in, const at::Tensor& out) override;
  WorkPtr all_reduce_async(const at::Tensor& t) override;
  WorkPtr broadcast_async(const at::Tensor& t, int root) override;
  void barrier() override;

  cudaStream_t stream() const { return stream_.get(); }

 private:
  cudaStream_t begin();                                   // comm stream waits for compute
  WorkPtr finish(std::vector<at::Tensor> keep);           // event the compute stream can wait on
  cuda::NcclComm comm_;
  cuda::Stream stream_;
  cudaStream_t compute_;
};

}  // namespace shardtrain::comm
