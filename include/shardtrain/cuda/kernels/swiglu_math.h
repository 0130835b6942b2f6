// SwiGLU of one element, silu(gate) * up, and its gradients, rounded where the composite LibTorch
// ops round: silu in fp32 then to the storage type (R), the product to R; backward as autograd runs
// mul's and silu's backward. The expressions are ATen's, with the fma that both GCC (ATen's CPU
// kernels) and nvcc (its CUDA kernels) make of silu_backward's 1 + x * (1 - s) written out, so
// that no compiler's contraction choice matters. Shared by the CUDA kernels and the host loop.
#pragma once
#include "shardtrain/cuda/kernels/elem_round.h"

namespace shardtrain::cuda::kernels {

// at::silu: x / (1 + exp(-x)) in fp32, one rounding to the storage type.
template <class R>
ST_HD inline float silu_value(float g) {
  return R::round(g / (1.0f + expf(-g)));
}

template <class R>
ST_HD inline float swiglu_forward(float g, float u) {
  return R::round(mul_rn(silu_value<R>(g), u));
}

// dup = dy * silu(g) (silu as stored); dgate = silu_backward(dy * up, g), with dy * up rounded
// to R first as mul's backward leaves it. Only gate and up are needed, not silu(g) or the output.
template <class R>
ST_HD inline void swiglu_backward(float dy, float g, float u, float* dgate, float* dup) {
  *dup = R::round(mul_rn(dy, silu_value<R>(g)));
  const float da = R::round(mul_rn(dy, u));
  const float s = 1.0f / (1.0f + expf(-g));
  *dgate = R::round(da * s * fmaf(g, 1.0f - s, 1.0f));
}

}  // namespace shardtrain::cuda::kernels
