// What the GPU tests share: a relative error, and `shardtrain train` at world size 1 (one GPU is
// one NCCL rank).
#pragma once
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "run_binary.h"

// ||a - b|| / ||b||, in fp64 whatever the tensors' dtypes.
inline double rel(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).norm().item<double>() /
         b.to(at::kDouble).norm().item<double>();
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
