#include "shardtrain/cuda/nccl_comm.h"

#include <utility>

#include "shardtrain/runtime/error.h"

namespace shardtrain::cuda {

NcclComm NcclComm::bootstrap(MPI_Comm group) {
  NcclComm c;
  MPI_CHECK(MPI_Comm_rank(group, &c.rank_));
  MPI_CHECK(MPI_Comm_size(group, &c.size_));
  ncclUniqueId id{};
  if (c.rank_ == 0) NCCL_CHECK(ncclGetUniqueId(&id));
  MPI_CHECK(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, group));
  NCCL_CHECK(ncclCommInitRank(&c.comm_, c.size_, id, c.rank_));
  return c;
}

NcclComm NcclComm::split(const NcclComm& parent, int color, int key) {
  NcclComm c;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  // Own resources (NCCL reads splitShare from the parent's config, PyTorch's default too): shared
  // ones would serialise the child's collectives with the parent's, gathers behind reductions.
  config.splitShare = 0;
  NCCL_CHECK(ncclCommSplit(parent.comm_, color, key, &c.comm_, &config));
  NCCL_CHECK(ncclCommCount(c.comm_, &c.size_));
  NCCL_CHECK(ncclCommUserRank(c.comm_, &c.rank_));
  return c;
}

NcclComm::NcclComm(NcclComm&& o) noexcept
    : comm_(std::exchange(o.comm_, nullptr)), rank_(o.rank_), size_(o.size_) {}

NcclComm& NcclComm::operator=(NcclComm&& o) noexcept {
  if (this != &o) {
    if (comm_) ncclCommDestroy(comm_);
    comm_ = std::exchange(o.comm_, nullptr);
    rank_ = o.rank_;
    size_ = o.size_;
  }
  return *this;
}

NcclComm::~NcclComm() {
  if (comm_) ncclCommDestroy(comm_);
}

int nccl_version() {
  int v = 0;
  NCCL_CHECK(ncclGetVersion(&v));
  return v;
}

}  // namespace shardtrain::cuda
