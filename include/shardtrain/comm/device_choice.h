// Which device a rank drives: one GPU per rank of a machine (NCCL refuses two ranks on one GPU),
// or the CPU.
#pragma once
#include <string>

#include "shardtrain/runtime/mpi_env.h"

namespace shardtrain::comm {

// One CUDA device per rank, picked by the rank's place among the ranks on its machine (never the
// simulated nodes of --ranks-per-node) among the visible GPUs (CUDA_VISIBLE_DEVICES applies), for
// --device auto|cuda; cpu otherwise. Selects the device. Throws UsageError for --device cuda on a
// node without GPUs, and for more ranks on a machine than it has visible GPUs.
struct DeviceChoice {
  bool cuda = false;
  int index = -1;
  std::string name = "cpu";  // the GPU's name, for the FLOP/s peak table
};
DeviceChoice choose_device(const std::string& spec, const runtime::MpiEnv& env);
// Pure: the GPU of the rank that is machine_local_rank of the machine_local_size ranks sharing
// `host` (MPI_COMM_TYPE_SHARED), so no two ranks of a machine share one. Throws UsageError naming
// the host, its ranks and its GPUs when it has more ranks than visible GPUs.
int gpu_for_rank(int machine_local_rank, int machine_local_size, int visible_gpus,
                 const std::string& host);

}  // namespace shardtrain::comm
