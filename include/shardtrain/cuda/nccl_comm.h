// NCCL communicator bootstrapped over MPI: rank 0 makes the ncclUniqueId, MPI_Bcast shares it,
// every rank calls ncclCommInitRank. No TCP store, no rendezvous service.
#pragma once
#include <mpi.h>
#include <nccl.h>

namespace shardtrain::cuda {

class NcclComm {
 public:
  NcclComm() = default;
  // Collective over `group`; the caller has already selected its CUDA device.
  static NcclComm bootstrap(MPI_Comm group);
  // Collective over parent's ranks: the ranks that pass the same color form a new communicator,
  // ordered by key, sharing the parent's resources (no new bootstrap, no new buffers).
  static NcclComm split(const NcclComm& parent, int color, int key);
  NcclComm(NcclComm&& o) noexcept;
  NcclComm& operator=(NcclComm&& o) noexcept;
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;
  ~NcclComm();
  ncclComm_t get() const { return comm_; }
  int rank() const { return rank_; }
  int size() const { return size_; }

 private:
  ncclComm_t comm_ = nullptr;
  int rank_ = 0, size_ = 0;
};

int nccl_version();

}  // namespace shardtrain::cuda
