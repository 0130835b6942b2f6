#include "shardtrain/fsdp/objective.h"

#include <ATen/ATen.h>

#include "shardtrain/model/llama.h"
#include "shardtrain/model/lm_loss.h"
#include "shardtrain/model/row_logps.h"

namespace shardtrain::fsdp {

model::MicroBatch context_split(const model::Batch& rows, const comm::ParallelDims& groups) {
  return model::context_split(rows, groups.context->size(), groups.context->rank());
}

std::vector<model::MicroBatch> context_split(const std::vector<model::Batch>& batches,
                                             const comm::ParallelDims& groups) {
  return model::context_split(batches, groups.context->size(), groups.context->rank());
}

at::Tensor HeadOutput::token_loss_sum(double grad_hint) const {
  return chunk > 0 ? model::chunked_lm_loss(out, head_weight, labels, chunk, grad_hint, aligned)
                   : model::causal_lm_loss(out, labels, /*count=*/false, aligned).sum;
}

at::Tensor HeadOutput::row_logps() const {
  return chunk > 0 ? model::chunked_row_logps(out, head_weight, labels, chunk, aligned)
                   : model::row_logps(out, labels, aligned);
}

}  // namespace shardtrain::fsdp
