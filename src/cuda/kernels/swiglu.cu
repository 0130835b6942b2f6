// SwiGLU forward and backward over contiguous elements, 16 bytes per load where every pointer is
// 16-byte aligned (the common case: fresh allocations), one element at a time otherwise and for
// the tail. The merged variant reads gate and up as the two halves of each row of one [rows, 2f]
// projection output (and writes their gradients so), 16 bytes per load where f is a multiple of a
// pack and every pointer is 16-byte aligned, one element at a time otherwise. Element maths:
// swiglu_math.h, so both variants and the host loop round alike.
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
__global__ void swiglu_forward_kernel(const typename S::T* gate, const typename S::T* up,
                                      typename S::T* out, int64_t n) {
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
    for (int j = 0; j < V; ++j)
      o.v[j] = S::store(swiglu_forward<R>(S::load(g.v[j]), S::load(u.v[j])));
    reinterpret_cast<P*>(out)[i] = o;
  }
  for (int64_t i = packs * V + first; i < n; i += stride)
    out[i] = S::store(swiglu_forward<R>(S::load(gate[i]), S::load(up[i])));
}

template <class S, int V>
__global__ void swiglu_backward_kernel(const typename S::T* dy, const typename S::T* gate,
                                       const typename S::T* up, typename S::T* dgate,
                                       typename S::T* dup, int64_t n) {
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

// Pack p of the merged layout: row r, column c of the f columns (a multiple of V).
struct MergedIndex {
  int64_t row, col;
};
__device__ inline MergedIndex merged_index(int64_t p, int64_t packs_per_row, int V) {
  const int64_t r = p / packs_per_row;
  return {r, (p - r * packs_per_row) * V};
}

// f % V == 0: a pack never straddles the gate/up boundary or a row.
template <class S, int V>
__global__ void swiglu_merged_forward_kernel(const typename S::T* gate_up, typename S::T* out,
                                             int64_t rows, int64_t f) {
  using T = typename S::T;
  using R = typename S::R;
  using P = Pack<T, V>;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t packs_per_row = f / V;
  const int64_t packs = rows * packs_per_row;
  for (int64_t p = first; p < packs; p += stride) {
    const MergedIndex ix = merged_index(p, packs_per_row, V);
    const T* row = gate_up + ix.row * 2 * f;
    const P g = *reinterpret_cast<const P*>(row + ix.col);
    const P u = *reinterpret_cast<const P*>(row + f + ix.col);
    P o;
#pragma unroll
    for (int j = 0; j < V; ++j)
      o.v[j] = S::store(swiglu_forward<R>(S::load(g.v[j]), S::load(u.v[j])));
    *reinterpret_cast<P*>(out + ix.row * f + ix.col) = o;
  }
}

template <class S, int V>
__global__ void swiglu_merged_backward_kernel(const typename S::T* dy, const typename S::T* gate_up,
                                              typename S::T* d_gate_up, int64_t rows, int64_t f) {
  using T = typename S::T;
  using R = typename S::R;
  using P = Pack<T, V>;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t packs_per_row = f / V;
  const int64_t packs = rows * packs_per_row;
  for (int64_t p = first; p < packs; p += stride) {
    const MergedIndex ix = merged_index(p, packs_per_row, V);
    const int64_t in = ix.row * 2 * f + ix.col;  // gate's element; up's is f further
    const P d = *reinterpret_cast<const P*>(dy + ix.row * f + ix.col);
    const P g = *reinterpret_cast<const P*>(gate_up + in);
    const P u = *reinterpret_cast<const P*>(gate_up + in + f);
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
    *reinterpret_cast<P*>(d_gate_up + in) = dg;
    *reinterpret_cast<P*>(d_gate_up + in + f) = du;
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

unsigned blocks_for(int64_t items) {
  return static_cast<unsigned>(
      std::clamp<int64_t>((items + kThreads - 1) / kThreads, 1, kMaxBlocks));
}

}  // namespace

cudaError_t launch_swiglu_forward(ElemType type, const void* gate, const void* up, void* out,
                                  int64_t n, cudaStream_t stream) {
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

cudaError_t launch_swiglu_backward(ElemType type, const void* dy, const void* gate, const void* up,
                                   void* dgate, void* dup, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const bool vec =
      aligned16(dy) && aligned16(gate) && aligned16(up) && aligned16(dgate) && aligned16(dup);
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
      swiglu_backward_kernel<S, V>
          <<<blocks_for(n / V + 1), kThreads, 0, stream>>>(d, g, u, dg, du, n);
    } else {
      swiglu_backward_kernel<S, 1><<<blocks_for(n), kThreads, 0, stream>>>(d, g, u, dg, du, n);
    }
    return cudaGetLastError();
  });
}

cudaError_t launch_swiglu_merged_forward(ElemType type, const void* gate_up, void* out,
                                         int64_t rows, int64_t f, cudaStream_t stream) {
  if (rows == 0 || f == 0) return cudaSuccess;
  const bool aligned = aligned16(gate_up) && aligned16(out);
  return dispatch_elem(type, [&](auto s) {
    using S = decltype(s);
    using T = typename S::T;
    constexpr int V = 16 / sizeof(T);
    const auto* gu = static_cast<const T*>(gate_up);
    auto* o = static_cast<T*>(out);
    if (aligned && f % V == 0) {
      swiglu_merged_forward_kernel<S, V>
          <<<blocks_for(rows * (f / V)), kThreads, 0, stream>>>(gu, o, rows, f);
    } else {
      swiglu_merged_forward_kernel<S, 1>
          <<<blocks_for(rows * f), kThreads, 0, stream>>>(gu, o, rows, f);
    }
    return cudaGetLastError();
  });
}

cudaError_t launch_swiglu_merged_backward(ElemType type, const void* dy, const void* gate_up,
                                          void* d_gate_up, int64_t rows, int64_t f,
                                          cudaStream_t stream) {
  if (rows == 0 || f == 0) return cudaSuccess;
  const bool aligned = aligned16(dy) && aligned16(gate_up) && aligned16(d_gate_up);
  return dispatch_elem(type, [&](auto s) {
    using S = decltype(s);
    using T = typename S::T;
    constexpr int V = 16 / sizeof(T);
    const auto* d = static_cast<const T*>(dy);
    const auto* gu = static_cast<const T*>(gate_up);
    auto* dgu = static_cast<T*>(d_gate_up);
    if (aligned && f % V == 0) {
      swiglu_merged_backward_kernel<S, V>
          <<<blocks_for(rows * (f / V)), kThreads, 0, stream>>>(d, gu, dgu, rows, f);
    } else {
      swiglu_merged_backward_kernel<S, 1>
          <<<blocks_for(rows * f), kThreads, 0, stream>>>(d, gu, dgu, rows, f);
    }
    return cudaGetLastError();
  });
}

}  // namespace shardtrain::cuda::kernels
