#include "shardtrain/model/activation_memory.h"

#include "shardtrain/model/context_parallel.h"
#include "shardtrain/model/family.h"

#include <algorithm>

namespace shardtrain::model {

ActivationBytes activation_bytes_per_token(const ModelConfig& cfg, int elt, const LoraConfig* lora,
                                           const PackedRows* packed) {
  const int64_t h = cfg.hidden_size, i = cfg.intermediate_size, nh = cfg.num_heads;
  const int64_t kv = cfg.num_kv_heads * cfg.head_dim(), qw = nh * cfg.head_dim();
  const int64_t e = elt;
  const Family& fam = family(cfg.model_type);
  // rms_norm: fp32 x (x itself in fp32, a copy otherwise) and the normalized fp32 tensor
  // (saved in fp32 when the compute dtype is fp32, as its cast copy otherwise).
  const int64_t norm = e == 4 ? 4 * h : 4 * h + e * h;
  // Gemma's norms after each block too: each keeps what a norm keeps, its input included.
  const int64_t post_norms = fam.norms == NormPlacement::kSandwich ? 2 * (norm + e * h) : 0;
  // q/k norms (Qwen3, OLMo 2, Gemma 3) keep the projections' outputs, which nothing else keeps,
  // in fp32 beside the normalized tensors.
  const int64_t qk_norm = fam.qk_norm == QkNorm::kNone ? 0 : (e == 4 ? 8 : 4 + e) * (qw + kv);
  const int64_t sdpa_kv =
      2 * e * kv;  // K and V at kv width: enable_gqa, no repeat per query head (causal_attention)
  int64_t sdpa = e * qw /*q*/ + sdpa_kv + e * qw /*out*/ + 4 * nh /*logsumexp*/;
  if (cfg.attn_softcap > 0) {
    // Eager soft-capped attention (softcapped_attention) keeps K and V repeated per query head
    // and no logsumexp; its [T, T] terms are per row (with_eager_attention).
    sdpa = e * qw + 2 * e * qw + e * qw;
  } else if (packed && !packed->varlen) {
    // masked_attention: SDPA turns the bool mask into one in the compute dtype and keeps it, and
    // keeps K and V repeated per query head instead of at kv width.
    sdpa += e * packed->seq_len + 2 * e * (qw - kv);
  }
  ActivationBytes a;
  a.layer_input = e * h;
  const bool adapters = lora && lora->enabled();
  // A sparse layer (model/moe.h) in place of the MLP's gate, silu, up and product: the router's
  // fp32 softmax, and per chosen expert the token's sorted copy, the expert's gate, activation,
  // up and product, and its output before the weighting (every layer counted sparse).
  const int64_t k = cfg.experts_per_token, ei = cfg.expert_intermediate_size;
  const bool moe = cfg.is_moe();
  // (and the routing's int64 indices and fp32 weights, about 36 bytes per choice).
  const int64_t mlp = moe ? 4 * cfg.num_experts + 4 + k * (36 + 2 * e * h + 4 * e * ei) : 4 * e * i;
  // Selective checkpointing recomputes a dense MLP's activation only; a frozen base (LoRA) keeps
  // no expert's input nor product.
  const int64_t mlp_selective = moe ? mlp : 3 * e * i;
  const int64_t mlp_frozen = moe ? 4 * cfg.num_experts + 4 + k * (36 + 3 * e * ei) : 3 * e * i;
  const int64_t mlp_frozen_selective = moe ? mlp_frozen : 2 * e * i;
  if (!adapters) {
    // input, norm, q/k/v input, q/k norms, SDPA, residual, norm, MLP input, gate, silu, up,
    // product; Gemma's norms after the blocks.
    a.layer = e * h + norm + e * h + qk_norm + sdpa + e * h + norm + e * h + mlp + post_norms;
    // Selective checkpointing (model/checkpointed.h): the input, the q/k/v input, SDPA, the
    // residual (the post-norm region's input), the MLP input, gate, up and their product.
    a.layer_selective = e * h + e * h + sdpa + e * h + e * h + mlp_selective + qk_norm + post_norms;
  } else {
    // Frozen base weights: a linear keeps no input; each targeted projection keeps its dropped
    // input, the dropout mask and A's output. The norms keep only fp32 x (a copy under bf16).
    const int64_t frozen_norm = e == 4 ? 0 : 4 * h;
    int64_t adapter = 0;
    for (Proj p : layer_projections(cfg))
      if (lora->targets_proj(p)) adapter += 2 * e * proj_shape(cfg, p).in + e * lora->rank;
    // Frozen q/k norms keep their fp32 input; Gemma's frozen norms after the blocks, theirs.
    const int64_t frozen_qk = fam.qk_norm == QkNorm::kNone ? 0 : 4 * (qw + kv);
    const int64_t frozen_post = fam.norms == NormPlacement::kSandwich ? 2 * 4 * h : 0;
    a.layer = e * h + frozen_norm + sdpa + e * h + frozen_norm + mlp_frozen + adapter + frozen_qk +
              frozen_post;
    // input, SDPA, residual, gate, up, adapters
    a.layer_selective =
        e * h + sdpa + e * h + mlp_frozen_selective + adapter + frozen_qk + frozen_post;
  }
  // Recomputed in backward, at most at once: the activation's output and its product with up;
  // or a norm's saved tensors and its output.
  a.selective_recompute = moe ? norm + e * h : std::max(2 * e * i, norm + e * h);
  // A layer's backward holds the output gradient and, at most, two intermediate-sized gradients.
  a.layer_backward = 2 * e * h + 2 * e * (moe ? k * ei : i);
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

ActivationBytes with_eager_attention(ActivationBytes a, const ModelConfig& cfg, int elt,
                                     int64_t keys) {
  if (cfg.attn_softcap <= 0) return a;
  const int64_t nh = cfg.num_heads, e = elt;
  // Per token, each head's row of scores: tanh's output in the compute dtype, softmax's in fp32
  // and its cast for the product with V (the same tensor in fp32); the bool mask, one per row.
  const int64_t kept = nh * keys * (e + 4 + (e == 4 ? 0 : e)) + keys;
  a.layer += kept;
  a.layer_selective += kept;
  // Backward: the scores' gradient in fp32 and in the compute dtype at once.
  a.layer_backward += nh * keys * (4 + e);
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
