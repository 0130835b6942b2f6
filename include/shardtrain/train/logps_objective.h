// Each row's summed answer log-probability, forward only: DPO's reference model and
// 'eval --save-logps'. Under context parallelism each rank sums its share and the group adds them.
#pragma once
#include "shardtrain/comm/communicator.h"
#include "shardtrain/fsdp/objective.h"

namespace shardtrain::train {

// Each row's sum over the context group of this rank's partial sums [B]: the whole row's on every
// rank, differentiable in this rank's part only (each rank backpropagates its own tokens).
at::Tensor context_row_sum(const at::Tensor& partial, comm::Communicator& context);

class RowLogpsObjective : public fsdp::Objective {
 public:
  // adapters = false: an adapter run's base model alone (DPO's reference, no second copy).
  RowLogpsObjective(comm::Communicator& context, bool adapters = true)
      : context_(context), adapters_(adapters) {}
  fsdp::LossTerms loss(const fsdp::HeadOutput& head, const model::MicroBatch& mb, size_t index,
                       double inv_denominator) override;
  bool fused_head_in_eval() const override { return true; }  // the head as in training
  bool base_only() const override { return !adapters_; }
  // [B] fp64 on the host: every row's whole sum on every rank of its context group.
  at::Tensor evaluate(const fsdp::HeadOutput& head, const model::MicroBatch& mb) override;

 private:
  comm::Communicator& context_;
  bool adapters_;
};

}  // namespace shardtrain::train
