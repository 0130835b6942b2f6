#include "shardtrain/cuda/device_memory.h"

#include <cuda_runtime.h>

#include "shardtrain/runtime/error.h"
#ifdef SHARDTRAIN_TORCH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace shardtrain::cuda {

DeviceMemory device_memory(int device) {
  DeviceMemory m;
  size_t free = 0, total = 0;
  CUDA_CHECK(cudaMemGetInfo(&free, &total));
  m.total = static_cast<int64_t>(total);
#ifdef SHARDTRAIN_TORCH_CUDA
  using c10::CachingAllocator::StatType;
  const auto s =
      c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(device));
  m.peak_allocated = s.allocated_bytes[static_cast<size_t>(StatType::AGGREGATE)].peak;
  m.peak_reserved = s.reserved_bytes[static_cast<size_t>(StatType::AGGREGATE)].peak;
#else
  (void)device;
#endif
  return m;
}

int64_t device_free_bytes() {
  size_t free = 0, total = 0;
  CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return static_cast<int64_t>(free);
}

void reset_peak_memory(int device) {
#ifdef SHARDTRAIN_TORCH_CUDA
  c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(device));
#else
  (void)device;
#endif
}

}  // namespace shardtrain::cuda
