#include "shardtrain/train/logps_objective.h"

#include <ATen/ATen.h>

#include "shardtrain/runtime/error.h"

namespace shardtrain::train {

at::Tensor context_row_sum(const at::Tensor& partial, comm::Communicator& context) {
  if (context.size() == 1) return partial;
  at::Tensor whole = partial.detach().to(at::kDouble, /*non_blocking=*/false, /*copy=*/true);
  context.all_reduce(whole);
  // The value is the group's sum, alike on every rank; the gradient flows to this rank's share.
  return whole.to(partial.scalar_type()) + (partial - partial.detach());
}

fsdp::LossTerms RowLogpsObjective::loss(const fsdp::HeadOutput&, const model::MicroBatch&, size_t,
                                        double) {
  throw runtime::Error("row log-probabilities are read forward only, not trained");
}

at::Tensor RowLogpsObjective::evaluate(const fsdp::HeadOutput& head, const model::MicroBatch&) {
  if (!head.out.defined()) return at::zeros({0}, at::kDouble);
  return context_row_sum(head.row_logps(), context_).to(at::kCPU, at::kDouble);
}

}  // namespace shardtrain::train
