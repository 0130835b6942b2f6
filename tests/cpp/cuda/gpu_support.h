// What the GPU tests share: a relative error, and `shardtrain train` at world size 1 (one GPU is
// one NCCL rank).
#pragma once
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "run_binary.h"
#ifdef SHARDTRAIN_TORCH_CUDA
#include "shardtrain/cuda/cuda_handles.h"
#endif

// ||a - b|| / ||b||, in fp64 whatever the tensors' dtypes.
inline double rel(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).norm().item<double>() /
         b.to(at::kDouble).norm().item<double>();
}

// Milliseconds per call of fn on the device, the median of 10 after 3 warm-up calls (the bench
// parts read the lines the timing tests print).
template <class F>
double time_ms(F fn) {
  const auto sync = [] {
#ifdef SHARDTRAIN_TORCH_CUDA
    shardtrain::cuda::device_synchronize();
#endif
  };
  for (int i = 0; i < 3; ++i) fn();
  std::vector<double> ms;
  for (int i = 0; i < 10; ++i) {
    sync();
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    sync();
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return (ms[4] + ms[5]) / 2;
}

// train ARGS under mpirun -np 1, its metrics into the scratch folder's NAME.jsonl (removed first:
// a file left by an earlier run would pass for this one's); returns the metrics lines.
inline std::vector<nlohmann::json> train_at_world_one(const std::string& name,
                                                      const std::string& args) {
  using namespace testing_support;
  const auto metrics = tmp(name + ".jsonl");
  std::filesystem::remove(metrics);
  const auto r = run("train " + args + " --metrics-file " + metrics, mpiexec() + "1 ");
  EXPECT_EQ(r.code, 0) << r.out;
  return read_jsonl(metrics);
}
