#include "shardtrain/model/generate.h"

#include <algorithm>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/GradMode.h>

#include <limits>

#include "shardtrain/runtime/error.h"

namespace shardtrain::model {

at::Tensor top_p_filter(const at::Tensor& logits, double top_p) {
  if (top_p >= 1.0) return logits;
  auto [sorted, idx] = logits.sort(/*dim=*/-1, /*descending=*/false);
  auto cum = sorted.softmax(-1).cumsum(-1);
  // Ascending order: drop the low tail whose mass stays within 1 - top_p; keep the top token.
  auto remove = cum.le(1.0 - top_p);
  remove.index_put_({-1}, false);
  auto mask = at::zeros_like(remove).scatter(-1, idx, remove);
  return logits.masked_fill(mask, -std::numeric_limits<float>::infinity());
}

std::vector<int32_t> generate(const LogitsFn& logits, const std::vector<int32_t>& prompt,
                              const GenerateConfig& cfg) {
  if (prompt.empty())
    throw runtime::UsageError("generate needs a non-empty prompt (at least the BOS token)");
  c10::NoGradGuard no_grad;
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(cfg.seed);
  std::vector<int64_t> ctx(prompt.begin(), prompt.end());
  std::vector<int32_t> out;
  for (int64_t i = 0; i < cfg.max_new_tokens; ++i) {
    if (cfg.max_context > 0 && static_cast<int64_t>(ctx.size()) >= cfg.max_context) break;
    auto tokens = at::tensor(ctx, at::kLong).unsqueeze(0);
    auto last = logits(tokens).select(1, -1).squeeze(0).to(at::kFloat);  // [V]
    int64_t next;
    if (cfg.temperature <= 0) {
      next = last.argmax().item<int64_t>();
    } else {
      auto probs = top_p_filter(last / cfg.temperature, cfg.top_p).softmax(-1);
      next = at::multinomial(probs, 1, /*replacement=*/false, gen).item<int64_t>();
    }
    if (std::find(cfg.stop_ids.begin(), cfg.stop_ids.end(), next) != cfg.stop_ids.end()) break;
    out.push_back(static_cast<int32_t>(next));
    ctx.push_back(next);
  }
  return out;
}

bool stopped_at_context_limit(size_t prompt_tokens, size_t new_tokens, const GenerateConfig& cfg) {
  // EOS ends the answer before the context grows, so a full context means the limit stopped it.
  return cfg.max_context > 0 &&
         static_cast<int64_t>(prompt_tokens + new_tokens) >= cfg.max_context &&
         static_cast<int64_t>(new_tokens) < cfg.max_new_tokens;
}

}  // namespace shardtrain::model
