// Direct preference optimisation's losses on summed answer log-probabilities, as TRL's
// DPOTrainer computes them (loss_type "sigmoid" and "ipo"), with TRL's metrics.
#pragma once

#include <ATen/ATen.h>

#include <array>

#include "shardtrain/model/row_logps.h"
#include "shardtrain/runtime/enum_names.h"

namespace shardtrain::model {

enum class PreferenceLossType { kSigmoid, kIpo };
inline constexpr runtime::EnumName<PreferenceLossType> kPreferenceLossNames[] = {
    {PreferenceLossType::kSigmoid, "sigmoid"}, {PreferenceLossType::kIpo, "ipo"}};

// TRL's DPOConfig defaults: beta 0.1, loss_type sigmoid.
struct PreferenceConfig {
  PreferenceLossType loss = PreferenceLossType::kSigmoid;
  double beta = 0.1;
};

// The metrics' sums over a batch's pairs: the pair count, the loss, then TRL's metrics in
// obs::kPreferenceMetricNames' order (rewards/chosen, rewards/rejected, rewards/accuracies,
// rewards/margins, logps/chosen, logps/rejected).
inline constexpr int kNumPreferenceStats = 8;

struct PreferenceTerms {
  at::Tensor losses;  // [P] each pair's loss, differentiable in policy
  at::Tensor stats;   // [kNumPreferenceStats] fp64 sums, detached
};

// Rows in pairs: 2i the chosen answer, 2i + 1 the rejected one. policy and reference: [2P] summed
// answer log-probabilities; tokens: [2P] answer tokens (ipo averages the log-ratios over them).
PreferenceTerms preference_loss(const at::Tensor& policy, const at::Tensor& reference,
                                const at::Tensor& tokens, const PreferenceConfig& cfg);

// The means the metrics report, from summed stats (all ranks'); pairs 0: none. values: in
// obs::kPreferenceMetricNames' order.
struct PreferenceMetrics {
  int64_t pairs = 0;
  double loss = 0;
  std::array<double, 6> values{};
};
PreferenceMetrics preference_metrics(const at::Tensor& stats);

}  // namespace shardtrain::model
