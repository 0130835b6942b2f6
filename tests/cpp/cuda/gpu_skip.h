// Why a GPU test cannot run here, or "" when it can. Every GPU test skips with "GPU test skipped: "
// and this reason; bench/gpu_suite.sh --parts tests counts such a skip as a failure on a GPU
// machine.
#pragma once
#include <gtest/gtest.h>

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
