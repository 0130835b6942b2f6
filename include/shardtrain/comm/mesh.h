// Building the mesh on a backend: MPI's communicators, or NCCL's bootstrapped over the same MPI
// groups.
#pragma once
#include <string>

#include "shardtrain/comm/parallel_dims.h"

namespace shardtrain::comm {

// The mesh over MPI, or NCCL communicators bootstrapped over the same MPI groups (CUDA builds,
// nccl = true; else a UsageError naming --device).
ParallelDims make_parallel_dims(const GroupLayout& layout, const runtime::Topology& topo,
                                bool nccl = false, const std::string& host = "");

}  // namespace shardtrain::comm
