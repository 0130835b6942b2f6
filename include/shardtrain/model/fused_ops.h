// Fused rotary embedding and SwiGLU as autograd Functions: on CUDA tensors the kernels of
// cuda/kernels/fused_kernels.h (one launch for q and k; one for the MLP's gate), elsewhere a host
// loop over the same element functions (for tests, not speed). Their values and gradients are the
// composite ops' (apply_rotary, activation("silu", gate) * up), rounded at the same points.
#pragma once
#include <ATen/core/Tensor.h>

#include <string>
#include <utility>

namespace shardtrain::model {

// Whether the fused CUDA kernels serve x: a CUDA build, x on a CUDA device, in fp32, bf16 or fp16.
// Elsewhere the Functions below still run, through their host loop.
bool fused_kernels_available(const at::Tensor& x);

// q [B, nh, T, D] and k [B, nkv, T, D] at any strides with D contiguous (decoder_layer's views
// of the projections), cos/sin in q's dtype: [T, D] or TokenLayout's gathered [B, 1, T, D].
// Returns (apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)) in the inputs' layout. The
// tables take no gradient.
std::pair<at::Tensor, at::Tensor> fused_rotary(const at::Tensor& q, const at::Tensor& k,
                                               const at::Tensor& cos, const at::Tensor& sin);

// As fused_rotary, with token (b, t) taking row positions[b][t] of cos/sin [max_pos, D] (Rotary's
// tables): packed rows without a gathered copy. positions: [B, T] integer on q's device; on CUDA
// its range is the caller's to ensure (checking it would synchronize).
std::pair<at::Tensor, at::Tensor> fused_rotary_at(const at::Tensor& q, const at::Tensor& k,
                                                  const at::Tensor& cos, const at::Tensor& sin,
                                                  const at::Tensor& positions);

// Whether fused_swiglu computes activation(act, gate) * up: silu and its alias swish.
bool fused_swiglu_supports(const std::string& act);

// silu(gate) * up for gate and up of one shape and dtype; backward keeps only gate and up.
at::Tensor fused_swiglu(const at::Tensor& gate, const at::Tensor& up);

// fused_swiglu over a merged gate/up projection (one GEMM with [W_gate; W_up]): gate_up [..., 2F],
// contiguous, gate = gate_up[..., :F] and up = gate_up[..., F:]. Returns silu(gate) * up [..., F],
// bit for bit fused_swiglu's on the two halves; backward keeps only gate_up and returns one
// gradient [..., 2F] (dgate in each row's first half, dup in its second), the merged GEMM's.
at::Tensor fused_swiglu_merged(const at::Tensor& gate_up);

}  // namespace shardtrain::model
