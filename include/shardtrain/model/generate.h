// Autoregressive decoding: greedy, or temperature + top-p (nucleus) sampling with Hugging
// Face's TopPLogitsWarper semantics. The full context is re-run each token (no KV cache).
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace shardtrain::model {

using LogitsFn = std::function<at::Tensor(const at::Tensor& tokens)>;  // [B, T] int64 -> [B, T, V]

struct GenerateConfig {
  int64_t max_new_tokens = 64;
  double temperature = 0;  // 0: greedy
  double top_p = 1.0;
  uint64_t seed = 0;
  std::vector<int32_t> stop_ids = {2};  // EOS ids: any of them ends the answer
  int64_t max_context = 0;  // stop before the context exceeds this (the model's max positions)
};

// logits [V] with everything outside the smallest set whose probability reaches top_p set to
// -inf; the most likely token is always kept.
at::Tensor top_p_filter(const at::Tensor& logits, double top_p);

// The generated ids after the prompt, stopping at EOS (not included), max_new_tokens, or when
// prompt and answer fill max_context.
std::vector<int32_t> generate(const LogitsFn& logits, const std::vector<int32_t>& prompt,
                              const GenerateConfig& cfg);

// Whether generate() stopped because the context reached max_context (not at EOS, nor after
// max_new_tokens).
bool stopped_at_context_limit(size_t prompt_tokens, size_t new_tokens, const GenerateConfig& cfg);

}  // namespace shardtrain::model
