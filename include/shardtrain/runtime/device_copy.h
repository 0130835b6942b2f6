// Host tensors to the compute device without blocking the host.
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

namespace shardtrain::runtime {

// On CUDA from pinned memory, non-blocking (LibTorch's caching host allocator keeps the pinned
// block until the copy is done), as a DataLoader with pin_memory hands batches over; elsewhere
// the tensor itself when it is already there.
at::Tensor to_device(const at::Tensor& host, const at::Device& device);

}  // namespace shardtrain::runtime
