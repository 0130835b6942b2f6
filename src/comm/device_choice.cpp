#include "shardtrain/comm/device_choice.h"
#include "shardtrain/runtime/error.h"
#ifdef SHARDTRAIN_HAVE_CUDA
#include "shardtrain/cuda/cuda_handles.h"
#endif

namespace shardtrain::comm {

int gpu_for_rank(int machine_local_rank, int machine_local_size, int visible_gpus,
                 const std::string& host) {
  if (machine_local_size > visible_gpus) {
    const std::string gpus = std::to_string(visible_gpus);
    // NCCL refuses two ranks on one GPU, so sharing cannot be the fallback.
    throw runtime::UsageError(
        "--device: host " + host + " runs " + std::to_string(machine_local_size) +
        " ranks but sees " + gpus + " GPU" + (visible_gpus == 1 ? "" : "s") +
        " (CUDA_VISIBLE_DEVICES applies; --ranks-per-node does not change it): start at most " +
        gpus + " ranks on it (mpirun --map-by ppr:" + gpus +
        ":node, srun --ntasks-per-node=" + gpus + "), or use --device cpu");
  }
  return machine_local_rank;
}

DeviceChoice choose_device(const std::string& spec, const runtime::MpiEnv& env) {
  DeviceChoice d;
#ifdef SHARDTRAIN_HAVE_CUDA
  const int gpus = cuda::device_count();
  const char* why = " (check CUDA_VISIBLE_DEVICES and the driver)";
#else
  const int gpus = 0;
  const char* why = " (this build has no CUDA: nvcc and nccl.h were not found at configure time)";
#endif
  if (spec == "cuda" && gpus == 0)
    throw runtime::UsageError("--device cuda: no CUDA device is visible on " + env.host() + why +
                              "; use --device cpu");
  if (spec == "cpu" || gpus == 0) return d;
  d.cuda = true;
  // The real machine, not the simulated nodes: two simulated nodes on one machine share its GPUs.
  d.index = gpu_for_rank(env.machine().local_rank, env.machine().local_size, gpus, env.host());
#ifdef SHARDTRAIN_HAVE_CUDA
  cuda::set_device(d.index);
  d.name = cuda::device_info(d.index).name;
#endif
  return d;
}

}  // namespace shardtrain::comm
