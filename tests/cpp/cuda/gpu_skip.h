// Why a GPU test cannot run here, or "" when it can. Every GPU test skips with "GPU test skipped: "
// and this reason; bench/gpu_suite.sh --parts tests counts such a skip as a failure on a GPU
// machine.
#pragma once
#include <gtest/gtest.h>

#include <c10/core/Device.h>

#include <cstdlib>
#include <string>
#ifdef SHARDTRAIN_TORCH_CUDA
#include "shardtrain/cuda/cuda_handles.h"
#endif

inline std::string no_gpu_reason() {
#ifdef SHARDTRAIN_TORCH_CUDA
  if (shardtrain::cuda::device_count() == 0)
    return "no CUDA device is visible (no driver, or CUDA_VISIBLE_DEVICES is empty)";
  return "";
#else
  return "this build has no CUDA/NCCL with a CUDA LibTorch (nvcc or nccl.h was not found at "
         "configure time, or LibTorch is a CPU build)";
#endif
}

// Skips the calling test, saying why, unless a GPU can run it.
#define SKIP_WITHOUT_GPU()                                   \
  if (const std::string why = no_gpu_reason(); !why.empty()) \
  GTEST_SKIP() << "GPU test skipped: " << why

// SHARDTRAIN_GPU_TESTS_ON_CPU=1: the GPU tests written against gpu_test_device() run on the CPU
// instead of skipping, so their own logic is checked without a GPU (ctest's gpu_tests_on_cpu).
inline bool gpu_tests_on_cpu() {
  const char* v = std::getenv("SHARDTRAIN_GPU_TESTS_ON_CPU");
  return v != nullptr && std::string(v) == "1";
}
inline c10::Device gpu_test_device() {
  return gpu_tests_on_cpu() ? c10::Device(c10::kCPU) : c10::Device(c10::kCUDA, 0);
}
// gpu_test_device() as train's --device value.
inline std::string gpu_test_device_flag() { return gpu_tests_on_cpu() ? "cpu" : "cuda"; }

// SKIP_WITHOUT_GPU(), except in the CPU mode above.
#define SKIP_WITHOUT_GPU_OR_CPU_MODE() \
  if (!gpu_tests_on_cpu()) SKIP_WITHOUT_GPU()
