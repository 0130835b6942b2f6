// Ring attention over a context group (model/context_parallel.h). Each rank holds its queries and
// its K/V; the K/V buffers pass around the ring while each rank computes the block of its queries
// against the K/V it holds, the partial results merged by their log-sum-exp. Backward passes K/V
// around again, with the accumulated dK/dV travelling beside them back to their owner.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>

#include "shardtrain/model/context_parallel.h"
#include "shardtrain/model/masked_block.h"

namespace shardtrain::model {

// One block's attention: q [B, nh, Lq, D] over k, v [B, nkv, Lk, D] (GQA: nkv divides nh) where
// mask [B or 1, 1, Lq, Lk] is true (undefined: every key). Returns out [B, nh, Lq, D] and the
// log-sum-exp of the scaled scores [B, nh, Lq], both fp32; rows with no key: out 0, lse -inf.
// causal: key j only for query i >= j, the mask's diagonal block. On CUDA a block without a
// mask runs flash's kernel, a masked one the memory-efficient kernel; `path` forces one (tests).
// softcap > 0: the scores soft-capped (Gemma), on the math path.
BlockOut block_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const at::Tensor& mask, bool causal, BlockPath path = BlockPath::kAuto,
                         double softcap = 0);
// The block's gradients given the whole row's out and lse (flash attention's backward): dq
// [B, nh, Lq, D], dk, dv [B, nkv, Lk, D], fp32. dsum: rowsum(dout * out) [B, nh, Lq].
BlockGrads block_attention_backward(const at::Tensor& dout, const at::Tensor& q,
                                    const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
                                    const at::Tensor& lse, const at::Tensor& dsum,
                                    const at::Tensor& mask, bool causal,
                                    BlockPath path = BlockPath::kAuto, double softcap = 0);
// Merges a block into running (out, lse) in place: out = out * e^(lse - new) + b.out * e^(b.lse -
// new), new = logaddexp(lse, b.lse).
void merge_block(at::Tensor& out, at::Tensor& lse, const BlockOut& b);

// Causal attention of this rank's q [B, nh, L, D] over the whole row, k and v [B, nkv, L, D] being
// this rank's share (L = 2 * Tp / 2N, zigzag order). window > 0: keys at most window - 1 back;
// documents from ctx.doc; softcap > 0: soft-capped scores. Differentiable in q, k, v; every rank
// of the ring calls it together.
at::Tensor ring_attention(const ContextLayout& ctx, const at::Tensor& q, const at::Tensor& k,
                          const at::Tensor& v, int64_t window, double softcap = 0);

}  // namespace shardtrain::model
