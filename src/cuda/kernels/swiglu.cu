// SwiGLU forward and backward over contiguous elements, 16 bytes per load where every pointer is
// 16-byte aligned (the common case: fresh allocations), one element at a time otherwise and for
// the tail. Element maths: swiglu_math.h.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "elem_storage.cuh"
#include "shardtrain/cuda/kernels/fused_kernels.h"
#include "shardtrain/cuda/kernels/swiglu_math.h"

namespace shardtrain::cuda::kernels {
namespace {

template <class T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65536;  // a grid-stride loop covers the rest

template <class S, int V>
__global__ void swiglu_forward_kernel(const typename S::T* gate, const typename S::T* up, typename S::T* out,
                                      int64_t n) {
  using T = typename S::T;
  using R = typename S::R;
  using P = Pack<T, V>;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t packs = n / V;
  for (int64_t i = first; i < packs; i += stride) {
    const P g = reinterpret_cast<const P*>(gate)[i];
    const P u = reinterpret_cast<const P*>(up)[i];
    P o;
#pragma unroll
    for (int j = 0; j < V; ++j) o.v[j] = S::store(swiglu_forward<R>(S::load(g.v[j]), S::load(u.v[j])));
    reinterpret_cast<P*>(out)[i] = o;
  }
  for (int64_t i = packs * V + first; i < n; i += stride) out[i] = S::store(swiglu_forward<R>(S::load(gate[i]), S::load(up[i])));
}

template <class S, int V>
__global__ void swiglu_backward_kernel(const typename S::T* dy, const typename S::T* gate, const typename S::T* up,
                                       typename S::T* dgate, typename S::T* dup, int64_t n) {
  using T = typename S::T;
  using R = typename S::R;
  using P = Pack<T, V>;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t packs = n / V;
  for (int64_t i = first; i < packs; i += stride) {
    const P d = reinterpret_cast<const P*>(dy)[i];
    const P g = reinterpret_cast<const P*>(gate)[i];
    const P u = reinterpret_cast<const P*>(up)[i];
    P dg;
    P du;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      float a;
      float b;
      swiglu_backward<R>(S::load(d.v[j]), S::load(g.v[j]), S::load(u.v[j]), &a, &b);
      dg.v[j] = S::store(a);
      du.v[j] = S::store(b);
    }
    reinterpret_cast<P*>(dgate)[i] = dg;
    reinterpret_cast<P*>(dup)[i] = du;
  }
  for (int64_t i = packs * V + first; i < n; i += stride) {
    float a;
    float b;
    swiglu_backward<R>(S::load(dy[i]), S::load(gate[i]), S::load(up[i]), &a, &b);
    dgate[i] = S::store(a);
    dup[i] = S::store(b);
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

unsigned blocks_for(int64_t items) {
  return static_cast<unsigned>(std::clamp<int64_t>((items + kThreads - 1) / kThreads, 1, kMaxBlocks));
}

}  // namespace

cudaError_t launch_swiglu_forward(ElemType type, const void* gate, const void* up, void* out, int64_t n,
                                  cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const bool vec = aligned16(gate) && aligned16(up) && aligned16(out);
  return dispatch_elem(type, [&](auto s) {
    using S = decltype(s);
    using T = typename S::T;
    constexpr int V = 16 / sizeof(T);
    const auto* g = static_cast<const T*>(gate);
    const auto* u = static_cast<const T*>(up);
    auto* o = static_cast<T*>(out);
    if (vec) {
      swiglu_forward_kernel<S, V><<<blocks_for(n / V + 1), kThreads, 0, stream>>>(g, u, o, n);
    } else {
      swiglu_forward_kernel<S, 1><<<blocks_for(n), kThreads, 0, stream>>>(g, u, o, n);
    }
    return cudaGetLastError();
  });
}

cudaError_t launch_swiglu_backward(ElemType type, const void* dy, const void* gate, const void* up, void* dgate,
                                   void* dup, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const bool vec = aligned16(dy) && aligned16(gate) && aligned16(up) && aligned16(dgate) && aligned16(dup);
  return dispatch_elem(type, [&](auto s) {
    using S = decltype(s);
    using T = typename S::T;
    constexpr int V = 16 / sizeof(T);
    const auto* d = static_cast<const T*>(dy);
    const auto* g = static_cast<const T*>(gate);
    const auto* u = static_cast<const T*>(up);
    auto* dg = static_cast<T*>(dgate);
    auto* du = static_cast<T*>(dup);
    if (vec) {
      swiglu_backward_kernel<S, V><<<blocks_for(n / V + 1), kThreads, 0, stream>>>(d, g, u, dg, du, n);
    } else {
      swiglu_backward_kernel<S, 1><<<blocks_for(n), kThreads, 0, stream>>>(d, g, u, dg, du, n);
    }
    return cudaGetLastError();
  });
}

}  // namespace shardtrain::cuda::kernels
