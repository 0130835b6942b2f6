// Direct preference optimisation's losses on summed answer log-probabilities, as TRL's
// DPOTrainer computes them (loss_type "sigmoid" and "ipo"), with TRL's metrics.
#pragma once

#include <ATen/ATen.h>

#include <array>

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

// Each row's log-probability of its answer: the sum over tokens whose label is not -100 of
// log softmax(logits)[label], fp32 [B], differentiable in logits [B, T, V]. Hugging Face's shift
// (label t + 1 is token t's target) unless aligned.
at::Tensor row_logps(const at::Tensor& logits, const at::Tensor& labels, bool aligned = false);
// row_logps(at::linear(hidden, weight), labels) with the logits of chunk_tokens tokens at a time
// (hidden [B, T, H] the final norm's output, weight [V, H] lm_head), differentiable in both; the
// backward recomputes each chunk's logits, so no [B, T, V] tensor ever exists.
at::Tensor chunked_row_logps(const at::Tensor& hidden, const at::Tensor& weight,
                             const at::Tensor& labels, int64_t chunk_tokens, bool aligned = false);
// Each row's answer tokens (labels not -100 after the shift), [B] int64 on labels' device.
at::Tensor row_answer_tokens(const at::Tensor& labels, bool aligned = false);

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
