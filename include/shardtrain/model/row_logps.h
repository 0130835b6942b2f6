// Each row's summed log-probability of its answer tokens, from logits or chunk by chunk through
// lm_head: what DPO and its reference compute per row (model/preference_loss.h).
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>

namespace shardtrain::model {

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

}  // namespace shardtrain::model
