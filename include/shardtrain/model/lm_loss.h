// The head's matmul and the next-token cross-entropy fused and chunked: logits exist for one
// chunk of tokens at a time, never for the whole batch in fp32, and are never recomputed.
#pragma once
#include <ATen/ATen.h>

namespace shardtrain::model {

// hidden [B, T, H] (the final norm's output) and weight [V, H] (lm_head) in the compute dtype;
// labels [B, T] int64 with -100 where no loss is taken. Returns the fp32 sum of
// -log softmax(hidden[b, t] . weight^T)[labels[b, t+1]] over positions whose next label is not
// -100: causal_lm_loss(at::linear(hidden, weight), labels).sum, differentiable in hidden and
// weight. chunk_tokens: tokens whose logits are live at once (>= 1). The gradients are computed in
// the forward, for the incoming gradient grad_hint (the caller's 1 / token count), and held until
// backward, which rescales them on the device if its gradient differs: the loss must be the
// graph's end, and its backward must follow (the FSDP head's backward comes right after).
// aligned: labels[b, t] is hidden[b, t]'s target already (Batch::aligned_labels).
at::Tensor chunked_lm_loss(const at::Tensor& hidden, const at::Tensor& weight,
                           const at::Tensor& labels, int64_t chunk_tokens, double grad_hint = 1.0,
                           bool aligned = false);

// The chunk chunked_lm_loss runs with for `tokens` tokens; 0 for the unfused path. requested (the
// --loss-chunk option): > 0 that many tokens; 0 auto: a power of two near tokens / ceil(vocab /
// hidden), so a chunk's logits are about as big as the hidden states (Liger-Kernel's rule), and
// at least 256; < 0 unfused.
int64_t loss_chunk_tokens(int64_t tokens, int64_t vocab, int64_t hidden, int64_t requested);

// The chunked heads' shared GEMMs (this loss and row_logps.h's). A chunk's fp32 logits [m, V] =
// hc w^T: CUDA's half-precision GEMMs write fp32 directly; a CPU's run in the inputs' dtype.
at::Tensor head_logits(const at::Tensor& hc, const at::Tensor& w);
// dw (fp32 [V, H]) += dl^T hc, accumulated in fp32 with no [V, H] temporary and no rounding of a
// chunk's product to half precision: CUDA's fp32-output GEMM into dw; a CPU widens the half-
// precision rows first (exactly), which is the same sum.
void add_head_weight_grad(at::Tensor& dw, const at::Tensor& dl, const at::Tensor& hc);

}  // namespace shardtrain::model
