#include "shardtrain/train/sft_objective.h"

#include <ATen/ATen.h>

namespace shardtrain::train {

fsdp::LossTerms SftObjective::loss(const fsdp::HeadOutput& head, const model::MicroBatch&, size_t,
                                   double inv_denominator) {
  fsdp::LossTerms t;
  t.sum = head.token_loss_sum(inv_denominator);
  t.reported = t.sum.detach();  // each rank's tokens are its own, context groups included
  return t;
}

at::Tensor SftObjective::evaluate(const fsdp::HeadOutput& head, const model::MicroBatch&) {
  return head.out.defined() ? head.token_loss_sum() : at::Tensor();
}

}  // namespace shardtrain::train
