// Batched autoregressive decoding with a KV cache (model/decoder.h): the prompts of a batch
// left-padded and prefilled at once, then one step per token for the rows still going; a row that
// stops leaves the batch. Greedy, or Hugging Face's sampling warpers in its order (temperature,
// top-k, top-p) with each row's own generator, so a row's sample does not depend on what else is
// in the batch.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "shardtrain/model/decoder.h"
#include "shardtrain/runtime/enum_names.h"

namespace shardtrain::model {

struct GenerateConfig {
  int64_t max_new_tokens = 64;
  double temperature = 0;  // 0: greedy
  int64_t top_k = 0;       // 0: off
  double top_p = 1.0;      // 1: off
  uint64_t seed = 0;
  std::vector<int32_t> stop_ids = {2};            // EOS ids: any of them ends the answer
  std::vector<std::vector<int32_t>> stop_tokens;  // --stop strings' ids: ends the answer, dropped
  int64_t max_context = 0;  // stop before the context exceeds this (the model's max positions)
  int64_t batch = 16;       // --generate-batch: rows decoded at once
};

enum class StopReason { kEos, kStopString, kLength, kContext };
inline constexpr runtime::EnumName<StopReason> kStopReasonNames[] = {
    {StopReason::kEos, "eos"},
    {StopReason::kStopString, "stop"},
    {StopReason::kLength, "length"},
    {StopReason::kContext, "context"}};
const char* stop_reason_name(StopReason r);

struct Completion {
  std::vector<int32_t> ids;      // after the prompt, without the EOS or stop string that ended it
  std::vector<double> logprobs;  // [ids]: log softmax of the model's logits (temperature 1)
  StopReason stop = StopReason::kLength;
};

// logits [V] with everything outside the smallest set whose probability reaches top_p set to
// -inf; the most likely token is always kept.
at::Tensor top_p_filter(const at::Tensor& logits, double top_p);
// logits [V] with all but the top_k largest set to -inf (ties at the k-th kept, as transformers).
at::Tensor top_k_filter(const at::Tensor& logits, int64_t top_k);
// The distribution a sampled token is drawn from: softmax of the warped logits [V].
at::Tensor sampling_probs(const at::Tensor& logits, const GenerateConfig& cfg);

// Row i's generator seed: from the run's seed and the row's sample id, whatever its batch.
uint64_t row_seed(uint64_t seed, uint64_t sample);

// Every prompt's completion (prompts non-empty; ids must be < vocab_size), decoded cfg.batch rows
// at a time; seeds [prompts]: each row's generator (row_seed).
std::vector<Completion> generate(const Decoder& model,
                                 const std::vector<std::vector<int32_t>>& prompts,
                                 const std::vector<uint64_t>& seeds, const GenerateConfig& cfg);

}  // namespace shardtrain::model
