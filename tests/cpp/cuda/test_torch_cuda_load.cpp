// LibTorch's CUDA half is not linked: it loads where a GPU is found (cuda::load_torch_cuda), and
// once loaded its CUDA kernels are LibTorch's, as when it was linked.
#include <ATen/core/dispatch/Dispatcher.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include "cuda/gpu_skip.h"
#ifdef SHARDTRAIN_TORCH_CUDA
#include "shardtrain/cuda/cuda_handles.h"
#endif

namespace {
bool add_has_cuda_kernel() {
  const auto op = c10::Dispatcher::singleton().findSchema({"aten::add", "Tensor"});
  return op.has_value() && op->hasKernelForDispatchKey(c10::DispatchKey::CUDA);
}
}  // namespace

TEST(TorchCuda, LoadedWhereAGpuIsFoundAndItsKernelsRegister) {
#ifndef SHARDTRAIN_TORCH_CUDA
  GTEST_SKIP() << no_gpu_reason();  // the shared reason: this build has no CUDA LibTorch
#else
  if (shardtrain::cuda::device_count() == 0) {  // here, as on every machine without a GPU
    EXPECT_EQ(dlopen("libtorch_cuda.so", RTLD_NOW | RTLD_NOLOAD), nullptr)
        << "libtorch_cuda is loaded though no GPU asked for it (linked again?)";
    EXPECT_FALSE(add_has_cuda_kernel());
  }
  shardtrain::cuda::load_torch_cuda();
  shardtrain::cuda::load_torch_cuda();  // once: a second call is free
  EXPECT_NE(dlopen("libtorch_cuda.so", RTLD_NOW | RTLD_NOLOAD), nullptr);
  EXPECT_TRUE(add_has_cuda_kernel()) << "aten::add has no CUDA kernel after libtorch_cuda loaded";
#endif
}
