// Rotary embedding of q and k in one launch: a block per token, its threads over every head's
// (d, d + D/2) pairs, the token's cos/sin row read once per pair from L1. Element maths:
// rope_math.h.
#include <cuda_runtime.h>

#include <algorithm>

#include "elem_storage.cuh"
#include "shardtrain/cuda/kernels/fused_kernels.h"
#include "shardtrain/cuda/kernels/rope_math.h"

namespace shardtrain::cuda::kernels {
namespace {

template <class S>
__global__ void rope_kernel(RopeArgs a) {
  using T = typename S::T;
  using R = typename S::R;
  const int64_t token = blockIdx.x;
  const int64_t b = token / a.seq;
  const int64_t t = token % a.seq;
  const int64_t half = a.head_dim / 2;
  const int64_t row =
      a.positions ? a.positions[token] * a.head_dim : b * a.table_stride_b + t * a.table_stride_t;
  const T* cos = static_cast<const T*>(a.cos) + row;
  const T* sin = static_cast<const T*>(a.sin) + row;
  const int64_t pairs = (a.q.heads + a.k.heads) * half;
  for (int64_t i = threadIdx.x; i < pairs; i += blockDim.x) {
    const int64_t head = i / half;
    const int64_t d = i % half;
    const bool is_q = head < a.q.heads;
    const RopeOperand& op = is_q ? a.q : a.k;
    const int64_t h = is_q ? head : head - a.q.heads;
    const T* x =
        static_cast<const T*>(op.x) + b * op.x_stride[0] + h * op.x_stride[1] + t * op.x_stride[2];
    T* y = static_cast<T*>(op.y) + b * op.y_stride[0] + h * op.y_stride[1] + t * op.y_stride[2];
    const float x1 = S::load(x[d]);
    const float x2 = S::load(x[d + half]);
    const float c1 = S::load(cos[d]);
    const float c2 = S::load(cos[d + half]);
    const float s1 = S::load(sin[d]);
    const float s2 = S::load(sin[d + half]);
    float y1;
    float y2;
    if (a.backward) {
      rope_backward_pair<R>(x1, x2, c1, c2, s1, s2, &y1, &y2);
    } else {
      rope_forward_pair<R>(x1, x2, c1, c2, s1, s2, &y1, &y2);
    }
    y[d] = S::store(y1);
    y[d + half] = S::store(y2);
  }
}

}  // namespace

cudaError_t launch_rope(const RopeArgs& args, cudaStream_t stream) {
  const int64_t tokens = args.batch * args.seq;
  const int64_t pairs = (args.q.heads + args.k.heads) * (args.head_dim / 2);
  if (tokens == 0 || pairs == 0) return cudaSuccess;
  if (args.head_dim % 2 != 0 || tokens > 0x7fffffff) return cudaErrorInvalidValue;
  // A warp multiple covering a token's pairs, at most 256 threads.
  const int threads = static_cast<int>(std::min<int64_t>(256, (pairs + 31) / 32 * 32));
  return dispatch_elem(args.type, [&](auto s) {
    rope_kernel<decltype(s)><<<static_cast<unsigned>(tokens), threads, 0, stream>>>(args);
    return cudaGetLastError();
  });
}

}  // namespace shardtrain::cuda::kernels
