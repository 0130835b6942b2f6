// One training step's forward and backward under the next-token objective, as the training loop
// runs it: the micro-batches split for the engine's context group, then the engine's step.
#pragma once
#include <vector>

#include "shardtrain/fsdp/engine.h"
#include "shardtrain/fsdp/objective.h"
#include "shardtrain/train/sft_objective.h"

namespace shardtrain::test_steps {

inline fsdp::GradResult sft_step(fsdp::FsdpEngine& eng, const std::vector<model::Batch>& micro,
                                 bool read_loss = true) {
  static train::SftObjective sft;
  return eng.forward_backward(fsdp::context_split(micro, eng.groups()), sft, read_loss);
}

}  // namespace shardtrain::test_steps
