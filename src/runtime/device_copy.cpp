#include "shardtrain/runtime/device_copy.h"

#include <ATen/ATen.h>

namespace shardtrain::runtime {

at::Tensor to_device(const at::Tensor& host, const at::Device& device) {
  if (!device.is_cuda()) return host.to(device);
  return host.contiguous().pin_memory().to(device, /*non_blocking=*/true);
}

}  // namespace shardtrain::runtime
