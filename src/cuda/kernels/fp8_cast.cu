// Float8 casts: amax (a grid-stride reduction), the tensorwise cast with its transpose through a
// shared-memory tile, the rowwise cast (a row's amax and cast in one block), and the column-wise
// cast (the columns' amax over slabs of rows across the grid, then a tiled cast-transpose).
// Magnitudes are compared as fp32 bit patterns: for non-negative floats the order is the same, and
// a NaN (above +inf's pattern) wins, as torch.amax propagates it.
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

// The column-wise amax: a block takes a slab of kColwiseSlabRows rows of 32 columns and merges
// its column maxima into amax_bits[cols] (zeroed before) with an atomic max.
template <class S>
__global__ void colwise_amax_kernel(const typename S::T* x, int64_t rows, int64_t cols,
                                    uint32_t* amax_bits) {
  __shared__ uint32_t red[kTileRows][kTile];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kTile + threadIdx.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kColwiseSlabRows;
  const int64_t r1 = min(rows, r0 + kColwiseSlabRows);
  uint32_t m = 0;
  if (c < cols)
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kTileRows)
      m = max(m, magnitude_bits(S::load(x[r * cols + c])));
  red[threadIdx.y][threadIdx.x] = m;
  __syncthreads();
  if (threadIdx.y != 0 || c >= cols) return;
  for (int i = 1; i < kTileRows; ++i) m = max(m, red[i][threadIdx.x]);
  atomicMax(amax_bits + c, m);
}

// The cast with a scale per column, through a 32 x 32 tile written transposed: rows on grid.x,
// columns on grid.y, as cast_transpose_kernel.
template <class S>
__global__ void colwise_cast_transpose_kernel(const typename S::T* x, int64_t rows, int64_t cols,
                                              Fp8Format f, const uint32_t* amax_bits, uint8_t* qt) {
  __shared__ uint8_t tile[kTile][kTile + 1];
  const int64_t c = static_cast<int64_t>(blockIdx.y) * kTile + threadIdx.x;
  const float scale = c < cols ? fp8_scale(bits_float(amax_bits[c]), f) : 1.0f;
  for (int i = threadIdx.y; i < kTile; i += kTileRows) {
    const int64_t r = static_cast<int64_t>(blockIdx.x) * kTile + i;
    if (r < rows && c < cols)
      tile[i][threadIdx.x] = fp8_quantize(S::load(x[r * cols + c]), scale, f);
  }
  __syncthreads();
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kTile + threadIdx.x;
  for (int i = threadIdx.y; i < kTile; i += kTileRows) {
    const int64_t cc = static_cast<int64_t>(blockIdx.y) * kTile + i;
    if (r < rows && cc < cols) qt[cc * rows + r] = tile[threadIdx.x][i];
  }
}

// inv[c] = 1 / scale, in place of the column's amax bits (the same buffer).
__global__ void colwise_inverse_kernel(int64_t cols, Fp8Format f, float* inv) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c < cols) inv[c] = 1.0f / fp8_scale(bits_float(reinterpret_cast<uint32_t*>(inv)[c]), f);
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
  if (ceil_div(cols, kTile) > 65535 || ceil_div(rows, kColwiseSlabRows) > 65535)
    return cudaErrorInvalidValue;  // on grid.y
  // inv holds the columns' amax bits until the last kernel turns them into 1 / scale.
  auto* amax_bits = reinterpret_cast<uint32_t*>(inv);
  cudaError_t err = cudaMemsetAsync(inv, 0, sizeof(float) * static_cast<size_t>(cols), stream);
  if (err != cudaSuccess) return err;
  if (rows > 0) {
    err = dispatch_elem(type, [&](auto s) {
      using S = decltype(s);
      const auto* in = static_cast<const typename S::T*>(x);
      colwise_amax_kernel<S><<<dim3(static_cast<unsigned>(ceil_div(cols, kTile)),
                                    static_cast<unsigned>(ceil_div(rows, kColwiseSlabRows))),
                               dim3(kTile, kTileRows), 0, stream>>>(in, rows, cols, amax_bits);
      const dim3 grid(static_cast<unsigned>(ceil_div(rows, kTile)),
                      static_cast<unsigned>(ceil_div(cols, kTile)));
      colwise_cast_transpose_kernel<S>
          <<<grid, dim3(kTile, kTileRows), 0, stream>>>(in, rows, cols, f, amax_bits, qt);
      return cudaGetLastError();
    });
    if (err != cudaSuccess) return err;
  }
  colwise_inverse_kernel<<<static_cast<unsigned>(ceil_div(cols, kThreads)), kThreads, 0, stream>>>(
      cols, f, inv);
  return cudaGetLastError();
}

}  // namespace shardtrain::cuda::kernels
