// Bytes that autograd keeps per token for the model's own forward (model/llama.cpp), derived
// tensor by tensor from what each op saves for backward (docs/planner.md lists them). The
// planner's activation terms; checked against measured runs by tests/python/plan_validation.py.
#pragma once
#include <cstdint>

#include "shardtrain/model/config.h"
#include "shardtrain/model/lora.h"

namespace shardtrain::model {

struct ActivationBytes {    // per token
  int64_t layer = 0;        // one decoder layer's saved tensors, its input included
  int64_t layer_input = 0;  // what activation checkpointing keeps of a layer: its input
  // Selective checkpointing (model/checkpointed.h): a layer's tensors less what its norms and the
  // MLP's activation saved; and the most its recomputed regions make at once in backward.
  int64_t layer_selective = 0, selective_recompute = 0;
  int64_t layer_backward = 0;  // transient gradients while one layer's backward runs
  int64_t head = 0;            // the final norm's saved tensors and the head's input
  int64_t logits_loss =
      0;  // the loss's fp32 log-softmax and the two logit gradients of its backward
  // The fused head+loss (--loss-chunk): per token of one chunk, its fp32 logits and logsumexp's
  // temporary; per token of the batch, the hidden state's gradient; once, the weight gradient's
  // fp32 accumulator.
  int64_t fused_chunk = 0, fused_token = 0, fused_fixed = 0;
  int64_t vocab = 0, hidden = 0;  // the head's shape: the loss chunk follows from it
  int64_t step_held =
      0;  // held from the forward's start to the step's end: a packed batch's layout
};

// Packed rows (prepare --mode packing) and the path they take through attention (token_layout.h).
struct PackedRows {
  int64_t seq_len = 0;
  bool varlen = false;  // CUDA's variable-length kernel; false: the [T, T] document mask
};

// --fp8 (model/fp8.h), full fine-tuning: each projection keeps its input for the weight's gradient
// in float8 (1 byte) instead of the compute dtype, one copy per projection (q, k and v each, or
// one where merged); o_proj's is beside SDPA's own output, which SDPA keeps. A frozen base
// (LoRA) keeps no projection input, so `a` is returned as it is. Scales: a few floats per
// projection, left out.
ActivationBytes with_fp8(ActivationBytes a, const ModelConfig& cfg, int elt, bool merged,
                         const LoraConfig* lora);

// Soft-capped attention (Gemma 2) runs transformers' eager path: each row keeps its heads' [T, T]
// scores. `a` with those terms per token, for `keys` keys per query (the row's length; a
// context-parallel rank's share under the ring); `a` as it is for other models.
ActivationBytes with_eager_attention(ActivationBytes a, const ModelConfig& cfg, int elt,
                                     int64_t keys);

// Context parallelism (train --context-parallel n, model/context_parallel.h): a row is padded to a
// multiple of 2n tokens and each rank of the group holds 2 of its 2n chunks; this is its share.
int64_t context_tokens_per_rank(int64_t seq_len, int n);
// Per token of the rank, the ring's buffers while a layer's attention backward runs (its forward
// holds fewer): two K/V buffers in the compute dtype (current, in flight) and two dK/dV buffers in
// fp32 (model/ring_attention.cpp accumulates them in fp32). 0 for n = 1.
int64_t context_ring_bytes_per_token(const ModelConfig& cfg, int elt, int n);
// `a` with the ring's buffers added to layer_backward, the transient of a layer's backward; every
// other term is per token already, so the caller counts the rank's tokens only.
ActivationBytes with_context_parallel(ActivationBytes a, const ModelConfig& cfg, int elt, int n);

// elt: bytes of the compute dtype (4 fp32, 2 bf16). lora: nullptr or disabled for full fine-tuning.
// packed: nullptr for one document per row.
ActivationBytes activation_bytes_per_token(const ModelConfig& cfg, int elt,
                                           const LoraConfig* lora = nullptr,
                                           const PackedRows* packed = nullptr);

}  // namespace shardtrain::model
