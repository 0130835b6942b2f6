// Launchers of the fused RoPE and SwiGLU kernels (src/cuda/kernels/*.cu). They take raw pointers,
// sizes and strides, so the .cu files need no ATen headers; model/fused_ops.h wraps them in
// autograd Functions. Each returns the launch's cudaError_t.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace shardtrain::cuda::kernels {

enum class ElemType : int { kFloat32, kBFloat16, kFloat16 };

// One of q and k: [B, heads, T, D] at any strides for b, h, t (in elements); D is contiguous.
struct RopeOperand {
  const void* x = nullptr;  // input (backward: the output's gradient)
  void* y = nullptr;        // output (backward: the input's gradient); may alias x
  int64_t heads = 0;
  int64_t x_stride[3] = {0, 0, 0};  // b, h, t
  int64_t y_stride[3] = {0, 0, 0};
};

struct RopeArgs {
  ElemType type = ElemType::kFloat32;  // of q, k, cos and sin alike
  int64_t batch = 0, seq = 0, head_dim = 0;
  RopeOperand q, k;
  const void* cos = nullptr;  // rows of head_dim elements
  const void* sin = nullptr;
  // Token (b, t) reads the table row at b * table_stride_b + t * table_stride_t (elements):
  // a [T, D] table has table_stride_b 0, TokenLayout's gathered [B, 1, T, D] one T * D.
  int64_t table_stride_b = 0, table_stride_t = 0;
  // Or, when set: [batch, seq] int64 on the device, and token (b, t) reads row positions[b][t].
  const int64_t* positions = nullptr;
  bool backward = false;  // the transpose (rope_math.h): gradients of q and k
};

// q and k in one launch.
cudaError_t launch_rope(const RopeArgs& args, cudaStream_t stream);

// out = silu(gate) * up over n contiguous elements.
cudaError_t launch_swiglu_forward(ElemType type, const void* gate, const void* up, void* out,
                                  int64_t n, cudaStream_t stream);
// dgate, dup from dy, gate and up (n contiguous elements each).
cudaError_t launch_swiglu_backward(ElemType type, const void* dy, const void* gate, const void* up,
                                   void* dgate, void* dup, int64_t n, cudaStream_t stream);

// SwiGLU over a merged gate/up projection: gate_up is `rows` contiguous rows of 2 * f elements,
// gate the first f of each and up the last f; out (rows x f, contiguous) = silu(gate) * up. The
// element maths of launch_swiglu_forward, so the two agree bit for bit.
cudaError_t launch_swiglu_merged_forward(ElemType type, const void* gate_up, void* out,
                                         int64_t rows, int64_t f, cudaStream_t stream);
// d_gate_up (rows x 2f, contiguous): dgate in the first f of each row, dup in the last f, from dy
// (rows x f) and gate_up. May not alias gate_up or dy.
cudaError_t launch_swiglu_merged_backward(ElemType type, const void* dy, const void* gate_up,
                                          void* d_gate_up, int64_t rows, int64_t f,
                                          cudaStream_t stream);

}  // namespace shardtrain::cuda::kernels
