#include "shardtrain/comm/mesh.h"

#ifdef SHARDTRAIN_HAVE_CUDA
#include "shardtrain/comm/nccl_communicator.h"
#endif
#include "shardtrain/runtime/error.h"

namespace shardtrain::comm {

ParallelDims make_parallel_dims(const GroupLayout& layout, const runtime::Topology& topo, bool nccl,
                                const std::string& host) {
#ifdef SHARDTRAIN_HAVE_CUDA
  if (nccl) return make_nccl_groups(layout, topo, host);
#endif
  if (nccl)
    throw runtime::UsageError(
        "--device cuda: this build has no NCCL (rebuild where nvcc and nccl.h are found)");
  (void)host;
  return make_mpi_groups(layout, topo);
}

}  // namespace shardtrain::comm
