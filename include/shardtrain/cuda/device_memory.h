// GPU memory for the metrics: peaks of LibTorch's caching allocator (what PyTorch reports as
// torch.cuda.max_memory_allocated / max_memory_reserved) and the device's total.
#pragma once
#include <cstdint>

namespace shardtrain::cuda {

struct DeviceMemory {
  int64_t peak_allocated = -1;  // -1: LibTorch was built without CUDA
  int64_t peak_reserved = -1;
  int64_t total = 0;
};

DeviceMemory device_memory(int device);
int64_t device_free_bytes();  // the current device's free memory (cudaMemGetInfo): what NCCL's
                              // buffers take from it
// Starts the allocator's peaks afresh from what is allocated now (per-phase peaks).
void reset_peak_memory(int device);

}  // namespace shardtrain::cuda
