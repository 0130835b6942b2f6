#include "shardtrain/cli/commands.h"
#include "shardtrain/runtime/error.h"
#ifdef SHARDTRAIN_HAVE_CUDA
#include "shardtrain/cuda/cuda_handles.h"
#endif

namespace shardtrain::cli {

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
    throw runtime::UsageError("--device cuda: no CUDA device is visible on " + env.host() + why + "; use --device cpu");
  if (spec == "cpu" || gpus == 0) return d;
  d.cuda = true;
  d.index = env.topology().local_rank % gpus;
#ifdef SHARDTRAIN_HAVE_CUDA
  cuda::set_device(d.index);
  d.name = cuda::device_info(d.index).name;
#endif
  return d;
}

}  // namespace shardtrain::cli
