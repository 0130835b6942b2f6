#include "shardtrain/fsdp/host_memory.h"

#include <ATen/ATen.h>

#include <cstdlib>
#include <new>

#ifdef SHARDTRAIN_HAVE_CUDA
#include <cuda_runtime.h>

#include "shardtrain/runtime/error.h"
#endif

namespace shardtrain::fsdp {

at::Tensor host_tensor(int64_t numel, at::ScalarType dtype, bool pinned) {
  const auto options = at::TensorOptions().dtype(dtype);
#ifdef SHARDTRAIN_HAVE_CUDA
  if (pinned && numel > 0) {
    const size_t page = 4096;
    const size_t bytes =
        (static_cast<size_t>(numel) * c10::elementSize(dtype) + page - 1) / page * page;
    void* p = nullptr;
    if (posix_memalign(&p, page, bytes) != 0) throw std::bad_alloc();
    const cudaError_t e = cudaHostRegister(p, bytes, cudaHostRegisterDefault);
    if (e != cudaSuccess) {
      std::free(p);
      throw runtime::Error(std::string("--cpu-offload: cudaHostRegister of ") +
                           std::to_string(bytes) + " bytes failed: " + cudaGetErrorString(e) +
                           " (is the locked-memory limit, ulimit -l, high enough?)");
    }
    auto t = at::from_blob(
        p, {numel},
        [](void* q) {
          cudaHostUnregister(q);
          std::free(q);
        },
        options);
    return t.zero_();
  }
#endif
  (void)pinned;
  return at::zeros({numel}, options);
}

}  // namespace shardtrain::fsdp
