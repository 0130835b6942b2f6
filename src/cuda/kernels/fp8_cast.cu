// Float8 casts: amax (a grid-stride reduction), the tensorwise cast with its transpose through a
// shared-memory tile, and the rowwise and column-wise casts, each keeping its scales' amax and
// its cast in one kernel. Magnitudes are compared as fp32 bit patterns: for non-negative floats
// the order is the same, and a NaN (above +inf's pattern) wins, as torch.amax propagates it.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "elem_storage.cuh"
#include "shardtrain/cuda/kernels/fp8_kernels.h"
#include "shardtrain/cuda/kernels/fp8_math.h"

namespace shardtrain::cuda::kernels {
namespace {

constexpr int kTile = 32;      // the transpose tile: 32 x 32 elements
constexpr int kTileRows = 8;   // a block of 32 x 8 threads; each thread takes 4 rows of the tile
constexpr int kThreads = 256;  // the reductions' blocks
constexpr int64_t kMaxBlocks = 4096;

__device__ inline uint32_t magnitude_bits(float v) { return float_bits(fabsf(v)); }

// The block's largest of v (every thread's), in every thread; red holds kThreads entries.
__device__ uint32_t block_max(uint32_t v, uint32_t* red) {
  red[threadIdx.x] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s /= 2) {
    if (static_cast<int>(threadIdx.x) < s)
      red[threadIdx.x] = max(red[threadIdx.x], red[threadIdx.x + s]);
    __syncthreads();
  }
  const uint32_t m = red[0];
  __syncthreads();
  return m;
}

template <class S>
__global__ void amax_kernel(const typename S::T* x, int64_t n, uint32_t* amax_bits) {
  __shared__ uint32_t red[kThreads];
  uint32_t m = 0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    m = max(m, magnitude_bits(S::load(x[i])));
  m = block_max(m, red);
  if (threadIdx.x == 0) atomicMax(amax_bits, m);
}

template <class S>
__global__ void cast_transpose_kernel(const typename S::T* x, int64_t rows, int64_t cols,
                                      Fp8Format f, const float* amax, uint8_t* q, uint8_t* qt,
                                      float* inv) {
  __shared__ uint8_t tile[kTile][kTile + 1];
  const float scale = fp8_scale(*amax, f);
  if (inv && blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0 && threadIdx.y == 0)
    *inv = 1.0f / scale;
  const int64_t c = static_cast<int64_t>(blockIdx.y) * kTile + threadIdx.x;
  for (int i = threadIdx.y; i < kTile; i += kTileRows) {
    const int64_t r = static_cast<int64_t>(blockIdx.x) * kTile + i;
    if (r < rows && c < cols) {
      const uint8_t v = fp8_quantize(S::load(x[r * cols + c]), scale, f);
      if (q) q[r * cols + c] = v;
      tile[i][threadIdx.x] = v;
    }
  }
  if (!qt) return;
  __syncthreads();
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kTile + threadIdx.x;
  for (int i = threadIdx.y; i < kTile; i += kTileRows) {
    const int64_t cc = static_cast<int64_t>(blockIdx.y) * kTile + i;
    if (r < rows && cc < cols) qt[cc * rows + r] = tile[threadIdx.x][i];
  }
}

template <class S>
__global__ void rowwise_kernel(const typename S::T* x, int64_t cols, Fp8Format f, uint8_t* q,
                               float* inv) {
  __shared__ uint32_t red[kThreads];
  const typename S::T* row = x + static_cast<int64_t>(blockIdx.x) * cols;
  uint8_t* out = q + static_cast<int64_t>(blockIdx.x) * cols;
  uint32_t m = 0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
    m = max(m, magnitude_bits(S::load(row[c])));
  const float scale = fp8_scale(bits_float(block_max(m, red)), f);
  if (threadIdx.x == 0) inv[blockIdx.x] = 1.0f / scale;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
    out[c] = fp8_quantize(S::load(row[c]), scale, f);
}

// A block takes 32 columns: their amax over every row, then the cast, a 32 x 32 tile at a time,
// written transposed.
template <class S>
__global__ void colwise_transpose_kernel(const typename S::T* x, int64_t rows, int64_t cols,
                                         Fp8Format f, uint8_t* qt, float* inv) {
  __shared__ uint32_t red[kTileRows][kTile];
  __shared__ float scale[kTile];
  __shared__ uint8_t tile[kTile][kTile + 1];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kTile + threadIdx.x;
  uint32_t m = 0;
  if (c < cols)
    for (int64_t r = threadIdx.y; r < rows; r += kTileRows)
      m = max(m, magnitude_bits(S::load(x[r * cols + c])));
  red[threadIdx.y][threadIdx.x] = m;
  __syncthreads();
  if (threadIdx.y == 0) {
    for (int i = 1; i < kTileRows; ++i) m = max(m, red[i][threadIdx.x]);
    scale[threadIdx.x] = fp8_scale(bits_float(m), f);
    if (c < cols) inv[c] = 1.0f / scale[threadIdx.x];
  }
  __syncthreads();
  for (int64_t r0 = 0; r0 < rows; r0 += kTile) {
    for (int i = threadIdx.y; i < kTile; i += kTileRows) {
      const int64_t r = r0 + i;
      if (r < rows && c < cols)
        tile[i][threadIdx.x] = fp8_quantize(S::load(x[r * cols + c]), scale[threadIdx.x], f);
    }
    __syncthreads();
    const int64_t r = r0 + threadIdx.x;
    for (int i = threadIdx.y; i < kTile; i += kTileRows) {
      const int64_t cc = static_cast<int64_t>(blockIdx.x) * kTile + i;
      if (r < rows && cc < cols) qt[cc * rows + r] = tile[threadIdx.x][i];
    }
    __syncthreads();
  }
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

cudaError_t launch_fp8_amax(ElemType type, const void* x, int64_t n, float* amax,
                            cudaStream_t stream) {
  const cudaError_t err = cudaMemsetAsync(amax, 0, sizeof(float), stream);
  if (err != cudaSuccess || n == 0) return err;
  return dispatch_elem(type, [&](auto s) {
    using S = decltype(s);
    const int64_t blocks = std::min(kMaxBlocks, ceil_div(n, kThreads));
    amax_kernel<S><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
        static_cast<const typename S::T*>(x), n, reinterpret_cast<uint32_t*>(amax));
    return cudaGetLastError();
  });
}

cudaError_t launch_fp8_cast_transpose(ElemType type, const void* x, int64_t rows, int64_t cols,
                                      Fp8Format f, const float* amax, uint8_t* q, uint8_t* qt,
                                      float* inv, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  if (ceil_div(cols, kTile) > 65535) return cudaErrorInvalidValue;  // columns on grid.y
  return dispatch_elem(type, [&](auto s) {
    using S = decltype(s);
    // Rows (tokens, any number) on grid.x; columns (a model dimension) on grid.y, up to 65535.
    const dim3 grid(static_cast<unsigned>(ceil_div(rows, kTile)),
                    static_cast<unsigned>(ceil_div(cols, kTile)));
    cast_transpose_kernel<S><<<grid, dim3(kTile, kTileRows), 0, stream>>>(
        static_cast<const typename S::T*>(x), rows, cols, f, amax, q, qt, inv);
    return cudaGetLastError();
  });
}

cudaError_t launch_fp8_rowwise(ElemType type, const void* x, int64_t rows, int64_t cols,
                               Fp8Format f, uint8_t* q, float* inv, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  return dispatch_elem(type, [&](auto s) {
    using S = decltype(s);
    rowwise_kernel<S><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
        static_cast<const typename S::T*>(x), cols, f, q, inv);
    return cudaGetLastError();
  });
}

cudaError_t launch_fp8_colwise_transpose(ElemType type, const void* x, int64_t rows, int64_t cols,
                                         Fp8Format f, uint8_t* qt, float* inv,
                                         cudaStream_t stream) {
  if (cols == 0) return cudaSuccess;
  return dispatch_elem(type, [&](auto s) {
    using S = decltype(s);
    colwise_transpose_kernel<S>
        <<<static_cast<unsigned>(ceil_div(cols, kTile)), dim3(kTile, kTileRows), 0, stream>>>(
            static_cast<const typename S::T*>(x), rows, cols, f, qt, inv);
    return cudaGetLastError();
  });
}

}  // namespace shardtrain::cuda::kernels
