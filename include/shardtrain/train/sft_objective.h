// Supervised fine-tuning's objective: the next-token cross-entropy, a mean over the global batch's
// loss tokens (Hugging Face's causal LM loss with labels -100 ignored).
#pragma once
#include "shardtrain/fsdp/objective.h"

namespace shardtrain::train {

class SftObjective : public fsdp::Objective {
 public:
  fsdp::LossTerms loss(const fsdp::HeadOutput& head, const model::MicroBatch& mb, size_t index,
                       double inv_denominator) override;
  // Forward only: the loss summed over this rank's loss tokens (scalar, on the device; undefined
  // where the rank has no rows), from the whole logits.
  at::Tensor evaluate(const fsdp::HeadOutput& head, const model::MicroBatch& mb) override;
};

}  // namespace shardtrain::train
