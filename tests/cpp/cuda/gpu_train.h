// `shardtrain train` at world size 1 for the GPU tests: one GPU is one NCCL rank.
#pragma once
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "run_binary.h"

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
