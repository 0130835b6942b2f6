// Model FLOPs per token, for MFU and the planner (docs/metrics.md).
#pragma once
#include <cstdint>

#include "shardtrain/model/config.h"

namespace shardtrain::model {

// 6·N + 12·L·H·Q·T (torchtitan, llm-foundry): N = parameters excluding the input embedding,
// L layers, H heads, Q head dim, T sequence length. Covers forward + backward.
double flops_per_token(const ModelConfig& cfg, int64_t seq_len);

}  // namespace shardtrain::model
