#include "shardtrain/model/activation_memory.h"

#include "shardtrain/model/context_parallel.h"

#include <algorithm>

namespace shardtrain::model {

ActivationBytes activation_bytes_per_token(const ModelConfig& cfg, int elt, const LoraConfig* lora,
                                           const PackedRows* packed) {
  const int64_t h = cfg.hidden_size, i = cfg.intermediate_size, nh = cfg.num_heads;
  const int64_t kv = cfg.num_kv_heads * cfg.head_dim();
  const int64_t e = elt;
  // rms_norm: fp32 x (x itself in fp32, a copy otherwise) and the normalized fp32 tensor
  // (saved in fp32 when the compute dtype is fp32, as its cast copy otherwise).
  const int64_t norm = e == 4 ? 4 * h : 4 * h + e * h;
  const int64_t sdpa_kv =
      2 * e * kv;  // K and V at kv width: enable_gqa, no repeat per query head (causal_attention)
  int64_t sdpa = e * h /*q*/ + sdpa_kv + e * h /*out*/ + 4 * nh /*logsumexp*/;
  if (packed && !packed->varlen) {
    // masked_attention: SDPA turns the bool mask into one in the compute dtype and keeps it, and
    // keeps K and V repeated per query head instead of at kv width.
    sdpa += e * packed->seq_len + 2 * e * (nh * cfg.head_dim() - kv);
  }
  ActivationBytes a;
  a.layer_input = e * h;
  const bool adapters = lora && lora->enabled();
  if (!adapters) {
    // input, norm, q/k/v input, SDPA, residual, norm, MLP input, gate, silu, up, product.
    a.layer = e * h + norm + e * h + sdpa + e * h + norm + e * h + 4 * e * i;
    // Selective checkpointing (model/checkpointed.h): the input, the q/k/v input, SDPA, the
    // residual (the post-norm region's input), the MLP input, gate, up and their product.
    a.layer_selective = e * h + e * h + sdpa + e * h + e * h + 3 * e * i;
  } else {
    // Frozen base weights: a linear keeps no input; each targeted projection keeps its dropped
    // input, the dropout mask and A's output. The norms keep only fp32 x (a copy under bf16).
    const int64_t frozen_norm = e == 4 ? 0 : 4 * h;
    int64_t adapter = 0;
    for (Proj p : layer_projections(cfg))
      if (lora->targets_proj(p)) adapter += 2 * e * proj_shape(cfg, p).in + e * lora->rank;
    a.layer = e * h + frozen_norm + sdpa + e * h + frozen_norm + 3 * e * i + adapter;
    a.layer_selective =
        e * h + sdpa + e * h + 2 * e * i + adapter;  // input, SDPA, residual, gate, up, adapters
  }
  // Recomputed in backward, at most at once: the activation's output and its product with up;
  // or a norm's saved tensors and its output.
  a.selective_recompute = std::max(2 * e * i, norm + e * h);
  // A layer's backward holds the output gradient and, at most, two intermediate-sized gradients.
  a.layer_backward = 2 * e * h + 2 * e * i;
  a.head = e * h + norm + e * h;
  a.logits_loss = 3 * 4 * cfg.vocab_size;
  a.fused_chunk =
      8 *
      cfg.vocab_size;  // fp32 logits, and logsumexp's exp of them (then softmax in place, its cast)
  a.fused_token = e * h;
  a.fused_fixed = 4 * cfg.vocab_size * h;
  a.vocab = cfg.vocab_size;
  a.hidden = h;
  if (packed) {
    // The batch's positions (int64, and the prefetched batch's), the cos and sin gathered at them
    // in the compute dtype, and without the varlen kernel the bool document mask [B, 1, T, T].
    a.step_held = 2 * 8 + 2 * e * cfg.head_dim() + (packed->varlen ? 0 : packed->seq_len);
  }
  return a;
}

ActivationBytes with_fp8(ActivationBytes a, const ModelConfig& cfg, int elt, bool merged,
                         const LoraConfig* lora) {
  if (lora && lora->enabled()) return a;
  const int64_t h = cfg.hidden_size, i = cfg.intermediate_size, e = elt;
  // Kept in the compute dtype without --fp8: the q/k/v input, the MLP input and the product.
  const int64_t plain = e * h + e * h + e * i;
  // In float8: the q/k/v input (three copies, or one merged), o_proj's input, the MLP input (two
  // copies, or one merged) and the product.
  const int64_t fp8 = (merged ? h : 3 * h) + h + (merged ? h : 2 * h) + i;
  a.layer += fp8 - plain;
  a.layer_selective += fp8 - plain;
  return a;
}

int64_t context_tokens_per_rank(int64_t seq_len, int n) {
  if (n <= 1) return seq_len;  // no group, no padding
  return context_padded_length(seq_len, n) / n;
}

int64_t context_ring_bytes_per_token(const ModelConfig& cfg, int elt, int n) {
  if (n <= 1) return 0;
  const int64_t kv = cfg.num_kv_heads * cfg.head_dim();
  return 2 * (2 * elt * kv) + 2 * (2 * 4 * kv);  // 2 K/V in the compute dtype, 2 dK/dV in fp32
}

ActivationBytes with_context_parallel(ActivationBytes a, const ModelConfig& cfg, int elt, int n) {
  a.layer_backward += context_ring_bytes_per_token(cfg, elt, n);
  return a;
}

}  // namespace shardtrain::model
