// How one ring block of context-parallel attention runs (model/ring_attention.h): flash's kernel
// where no mask beyond causality applies; PyTorch's memory-efficient kernel with an additive mask
// where documents or a sliding window mask the block (it returns the log-sum-exp the ring merges
// by); the math path on a CPU and for what neither kernel takes. The choices and the mask's
// preparation are pure and tested on the CPU; the kernels run on CUDA only.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>

namespace shardtrain::model {

// Which kernel a block runs through; kAuto: the device's best (block_path).
enum class BlockPath { kAuto, kFlash, kMasked, kMath };

// A block's attention (ring_attention.h's block_attention): out [B, nh, Lq, D] and the
// log-sum-exp of the scaled scores [B, nh, Lq], fp32; and its gradients dq, dk, dv, fp32.
struct BlockOut {
  at::Tensor out, lse;
};
struct BlockGrads {
  at::Tensor dq, dk, dv;
};

// The path a block takes on its device (kFlash, kMasked or kMath).
BlockPath block_path(bool cuda, at::ScalarType dtype, bool masked, int64_t head_dim);

// Query rows per span of the math path, so its fp32 scores [B, nh, rows, Lk] (and their softmax
// and gradient) stay near 2^18 elements on a CPU (its caches) and 2^26 on a GPU (256 MiB: a few
// launches a block, not hundreds); at least 16 rows.
int64_t math_span_rows(int64_t batch, int64_t heads, int64_t keys, bool cuda);

// mask [B or 1, 1, Lq, Lk] bool (true: the key is seen; undefined: every key) with causality on
// the diagonal folded in (key j for query i >= j) when causal: [B or 1, 1, Lq, Lk].
at::Tensor block_keys(const at::Tensor& mask, bool causal, int64_t lq, int64_t lk,
                      const at::Device& device);
// The memory-efficient kernel's additive mask for `keys`: 0 where seen, -inf where not, in dtype,
// [batch, heads, Lq, Lk] viewed (expanded) from rows padded to a multiple of 16 keys (the kernel
// reads 16-element-aligned rows). open_empty_rows: a row that sees no key is 0 throughout, so the
// forward's softmax stays finite; the caller blanks its output.
at::Tensor additive_mask(const at::Tensor& keys, at::ScalarType dtype, int64_t batch, int64_t heads,
                         bool open_empty_rows);

// The memory-efficient kernel's forward and backward of block_attention(_backward) (CUDA):
// K/V repeated for GQA, the mask additive, fp32 results as the other paths give them.
BlockOut masked_block_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                const at::Tensor& keys);
BlockGrads masked_block_attention_backward(const at::Tensor& dout, const at::Tensor& q,
                                           const at::Tensor& k, const at::Tensor& v,
                                           const at::Tensor& out, const at::Tensor& lse,
                                           const at::Tensor& keys);

}  // namespace shardtrain::model
