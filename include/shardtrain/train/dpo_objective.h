// Direct preference optimisation as TRL's DPOTrainer trains it: rows in pairs (2i chosen, 2i + 1
// rejected), the loss a mean over the global batch's pairs of model::preference_loss on the rows'
// summed answer log-probabilities against a reference's, with TRL's metrics as the statistics.
// The objective owns its reference (train/dpo_reference.h builds it: a frozen model, the adapters'
// base, or a log-probabilities file).
#pragma once
#include <functional>
#include <vector>

#include "shardtrain/comm/communicator.h"
#include "shardtrain/fsdp/objective.h"
#include "shardtrain/model/preference_loss.h"

namespace shardtrain::train {

// The reference's log-probabilities for a micro-batch's rows: [B] summed answer log-probs.
using ReferenceFn = std::function<at::Tensor(const model::MicroBatch&)>;

class DpoObjective : public fsdp::Objective {
 public:
  // context: the rank's context group, whose ranks hold the same pairs (its first reports them).
  DpoObjective(const model::PreferenceConfig& cfg, ReferenceFn reference,
               comm::Communicator& context)
      : cfg_(cfg), reference_(std::move(reference)), context_(context) {}
  // The reference's log-probabilities of every micro-batch, before any training pass (the
  // reference may be this very model with its adapters off). Collective.
  void before_forward(const std::vector<model::MicroBatch>& micro) override;
  bool per_token() const override { return false; }
  int64_t units(const model::MicroBatch& mb) const override;  // pairs
  fsdp::LossTerms loss(const fsdp::HeadOutput& head, const model::MicroBatch& mb, size_t index,
                       double inv_denominator) override;
  int64_t num_stats() const override { return model::kNumPreferenceStats; }
  bool fused_head_in_eval() const override { return true; }  // the head as in training
  // Forward only: the loss's and metrics' sums over the batch's pairs ([kNumPreferenceStats]
  // fp64 on the host; zeros where the rank reports none).
  at::Tensor evaluate(const fsdp::HeadOutput& head, const model::MicroBatch& mb) override;
  const model::PreferenceConfig& config() const { return cfg_; }

 private:
  bool reports() const { return context_.rank() == 0; }
  // preference_loss on the whole rows: the policy's log-probabilities summed over the context
  // group against the reference's, with the answer lengths of the host's whole rows.
  model::PreferenceTerms terms(const fsdp::HeadOutput& head, const model::MicroBatch& mb,
                               const at::Tensor& reference) const;
  model::PreferenceConfig cfg_;
  ReferenceFn reference_;
  comm::Communicator& context_;
  std::vector<at::Tensor> reference_logps_;  // [micro-batches] of the pass under way
};

}  // namespace shardtrain::train
