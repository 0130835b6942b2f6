// Bytes that autograd keeps per token for the model's own forward (model/llama.cpp), derived
// tensor by tensor from what each op saves for backward (docs/planner.md lists them). The
// planner's activation terms; checked against measured runs by tests/python/plan_validation.py.
#pragma once
#include <cstdint>

#include "shardtrain/model/config.h"
#include "shardtrain/model/lora.h"

namespace shardtrain {

struct ActivationBytes {  // per token
  int64_t layer = 0;        // one decoder layer's saved tensors, its input included
  int64_t layer_input = 0;  // what activation checkpointing keeps of a layer: its input
  int64_t layer_backward = 0;  // transient gradients while one layer's backward runs
  int64_t head = 0;         // the final norm's saved tensors and the head's input
  int64_t logits_loss = 0;  // the loss's fp32 log-softmax and the two logit gradients of its backward
};

// elt: bytes of the compute dtype (4 fp32, 2 bf16). lora: nullptr or disabled for full fine-tuning.
ActivationBytes activation_bytes_per_token(const ModelConfig& cfg, int elt, const LoraConfig* lora = nullptr);

}  // namespace shardtrain
