// The MPI backend on CPU tensors. bf16/fp16 move as 16-bit words; their sums use a custom
// MPI_Op that adds in fp32 and rounds once, as NCCL's bf16 reductions do.
#pragma once
#include "shardtrain/comm/communicator.h"
#include "shardtrain/runtime/mpi_env.h"

namespace shardtrain::comm {

class MpiCommunicator : public Communicator {
 public:
  MpiCommunicator(runtime::MpiComm comm, std::string name);
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  MPI_Comm mpi() const override { return comm_.get(); }

  WorkPtr all_gather_async(const at::Tensor& in, const at::Tensor& out) override;
  WorkPtr reduce_scatter_async(const at::Tensor& in, const at::Tensor& out) override;
  WorkPtr all_reduce_async(const at::Tensor& t) override;
  WorkPtr broadcast_async(const at::Tensor& t, int root) override;
  void barrier() override;
  WorkPtr send_recv_async(const at::Tensor& send, int dst, const at::Tensor& recv,
                          int src) override;
  WorkPtr all_to_all_async(const at::Tensor& send, const std::vector<int64_t>& send_rows,
                           const at::Tensor& recv, const std::vector<int64_t>& recv_rows) override;

 private:
  runtime::MpiComm comm_;
  int rank_ = 0, size_ = 1;
};

// A communicator over MPI_COMM_WORLD duplicated (so library traffic never mixes with ours).
std::unique_ptr<MpiCommunicator> mpi_world();

}  // namespace shardtrain::comm
