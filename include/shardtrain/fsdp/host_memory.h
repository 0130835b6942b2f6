// Host buffers for --cpu-offload's state. Pinned ones are allocated at their exact size and
// registered with CUDA (cudaHostRegister): LibTorch's pinned allocator rounds each block up to a
// power of two, which would cost up to twice a 7B model's offloaded state in host memory.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>

namespace shardtrain::fsdp {

// A host tensor [numel] of `dtype`, zero-filled; pinned: page-locked for asynchronous copies
// (only where this build has CUDA and a device is present).
at::Tensor host_tensor(int64_t numel, at::ScalarType dtype, bool pinned);

}  // namespace shardtrain::fsdp
