// Where each token of a batch sits: its position within its document and the documents it must
// not attend across. Packed rows hold several documents; each restarts its positions at 0 and
// attends causally within itself only, so a packed row trains what one row per document would.
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <memory>

#include "shardtrain/model/context_parallel.h"

namespace shardtrain::model {

struct Rotary;
struct ExpertGroup;
struct RouterAux;
class KvCache;

struct TokenLayout {
  at::Tensor cos, sin;    // [T, D]: every row at 0..T-1; or [B, 1, T, D] at each token's position
  at::Tensor same_doc;    // [B, 1, T, T] bool: key j in query i's document and j <= i; undefined:
                          // plain causal
  at::Tensor cu_seqlens;  // [docs + 1] int32: document starts over the flattened batch (CUDA's
                          // varlen kernel)
  int64_t max_doc_len = 0;
  // Packed rows for the rotary kernel (no gathered cos/sin): each token's position [B, T] int64 on
  // the device, and Rotary's whole tables [max_pos, D].
  at::Tensor positions, table_cos, table_sin;
  // Context parallelism: the rank holds a share of each row and attention runs as a ring
  // (model/ring_attention.h); cos/sin and positions are the share's tokens'.
  std::shared_ptr<const ContextLayout> context;
  // Gemma 3: the same tokens with the sliding layers' RoPE tables (Rotary::local_cos); null for
  // other models.
  std::shared_ptr<const TokenLayout> local;
  // Expert parallelism (model/moe.h): the group a sparse layer's experts are split over; null:
  // every expert on this rank.
  std::shared_ptr<const ExpertGroup> experts;
  // output_router_logits: the pass's load-balancing loss (model/moe.h); null: none.
  std::shared_ptr<RouterAux> router_aux;
  // Decoding with a cache (model/kv_cache.h): attention reads and extends it; null otherwise.
  KvCache* kv_cache = nullptr;
  bool packed() const { return same_doc.defined() || cu_seqlens.defined(); }
};

// The layout of a batch of T tokens per row. positions [B, T] int64 on the host, or undefined;
// rows that are one document each need neither mask nor gather. On CUDA in bf16/fp16, packed
// rows go to the variable-length flash kernel (cu_seqlens) instead of a [T, T] mask.
// gather = false (the fused layers' rotary kernel on CUDA): packed rows carry positions and the
// whole tables instead of each token's gathered cos and sin.
// varlen = false: packed rows keep the [T, T] mask on CUDA too (soft-capped attention needs it).
TokenLayout token_layout(const Rotary& rope, const at::Tensor& positions, int64_t T,
                         const at::Device& device, at::ScalarType dtype, bool gather = true,
                         bool varlen = true);

// The layout of a context-parallel share (context_shard): each token's cos and sin at its place in
// the row (positions, too, for the rotary kernel) and the ring's view of the whole row.
TokenLayout context_token_layout(const Rotary& rope, const ContextShard& share, ContextRing ring,
                                 const at::Device& device);

// The layout of a decoding step over `cache`: each token's cos and sin at its position [rows, n]
// (host int64; -1: padding, rotated as position 0 and never attended to).
TokenLayout cache_token_layout(const Rotary& rope, const at::Tensor& positions, KvCache& cache,
                               const at::Device& device);

// Whether packed rows take CUDA's variable-length flash kernel (else the [T, T] mask): bf16/fp16 on
// CUDA.
bool packed_rows_use_varlen(bool cuda, at::ScalarType dtype);

// [T, T] bool: key j at most window - 1 positions before query i (transformers' sliding window).
at::Tensor sliding_band(int64_t T, int64_t window, const at::Device& device);

// Causal SDPA. q: [B, nh, T, D]; k, v: [B, nkv, T, D] with nkv dividing nh (grouped-query
// attention). native_gqa: SDPA's enable_gqa where the fused kernel SDPA would pick handles it
// (no [B, nh, T, D] copies of K and V); otherwise, and when false, K and V are repeated.
// window > 0 and < T: query i sees keys i - window + 1 .. i (transformers' sliding window).
at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            bool native_gqa = true, int64_t window = 0);
// SDPA of q [B, nh, T, D] over k, v [B, nkv, T, D] (repeated per query head) where mask [.., T, T]
// is true.
at::Tensor masked_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const at::Tensor& mask);

// Attention of q [B, nh, T, D] over k, v [B, nkv, T, D] as the layout allows (causal, within
// documents when packed), keys at most `window` back (0: all). softcap > 0: the scores are
// soft-capped (cap * tanh(s / cap), Gemma), which no fused kernel does: the eager path
// (softcapped_attention). Returns [B, nh, T, D].
at::Tensor layout_attention(const TokenLayout& layout, const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& v, int64_t window, double softcap = 0);
// transformers' eager attention with soft-capping: scores q k^T / sqrt(D) in q's dtype, capped,
// masked where mask [B or 1, 1, T, T] (causal when undefined) is false, softmax in fp32, then V.
at::Tensor softcapped_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                const at::Tensor& mask, double softcap);

}  // namespace shardtrain::model
