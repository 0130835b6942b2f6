#include "shardtrain/train/dpo_objective.h"

#include <ATen/ATen.h>

#include "shardtrain/model/row_logps.h"
#include "shardtrain/train/logps_objective.h"

namespace shardtrain::train {

void DpoObjective::before_forward(const std::vector<model::MicroBatch>& micro) {
  reference_logps_.clear();
  for (const model::MicroBatch& mb : micro)
    reference_logps_.push_back(reference_(mb));  // an empty batch too: a forward is collective
}

int64_t DpoObjective::units(const model::MicroBatch& mb) const {
  return reports() ? mb.whole.tokens.size(0) / 2 : 0;
}

model::PreferenceTerms DpoObjective::terms(const fsdp::HeadOutput& head,
                                           const model::MicroBatch& mb,
                                           const at::Tensor& reference) const {
  // The group's ranks each hold a share of every row's tokens and backpropagate through it.
  const at::Tensor policy = context_row_sum(head.row_logps(), context_);
  return model::preference_loss(
      policy, reference, model::row_answer_tokens(mb.whole.labels, mb.whole.aligned_labels), cfg_);
}

fsdp::LossTerms DpoObjective::loss(const fsdp::HeadOutput& head, const model::MicroBatch& mb,
                                   size_t index, double) {
  const model::PreferenceTerms t = terms(head, mb, reference_logps_[index]);
  fsdp::LossTerms out;
  out.sum = t.losses.sum();
  if (reports()) {
    out.reported = out.sum.detach();
    out.stats = t.stats;
  }
  return out;
}

at::Tensor DpoObjective::evaluate(const fsdp::HeadOutput& head, const model::MicroBatch& mb) {
  const at::Tensor zeros = at::zeros({model::kNumPreferenceStats}, at::kDouble);
  if (!head.out.defined()) return zeros;
  const model::PreferenceTerms t = terms(head, mb, reference_logps_.front());  // collective
  return reports() ? t.stats.to(at::kCPU) : zeros;
}

}  // namespace shardtrain::train
