// One training step's forward and backward under the next-token objective, as the training loop
// runs it: the micro-batches split for the mesh's context group, then the engine's step. And a
// test's engine settings in one struct, as the tests wrote them before sharding and the run plan
// were two.
#pragma once
#include <vector>

#include "shardtrain/fsdp/engine.h"
#include "shardtrain/fsdp/objective.h"
#include "shardtrain/train/sft_objective.h"

namespace shardtrain::test_steps {

// dims: the engine's mesh, whose context group splits the rows (null: whole rows).
inline fsdp::GradResult sft_step(fsdp::FsdpEngine& eng, const std::vector<model::Batch>& micro,
                                 bool read_loss = true, const comm::ParallelDims* dims = nullptr) {
  static train::SftObjective sft;
  return eng.forward_backward(
      dims ? fsdp::context_split(micro, *dims) : model::context_split(micro, 1, 0), sft, read_loss);
}

// How a test's engine is sharded and what its units compute.
struct EngineOptions : fsdp::ShardingConfig, model::RunPlan {};

inline fsdp::EngineSpec spec(const model::ModelConfig& m, const EngineOptions& o,
                             at::Device device = at::kCPU) {
  return {m, o, o, device};
}
inline fsdp::EngineSpec spec(const model::ModelConfig& m, const fsdp::ShardingConfig& s,
                             at::Device device = at::kCPU) {
  return {m, s, {}, device};
}

}  // namespace shardtrain::test_steps
