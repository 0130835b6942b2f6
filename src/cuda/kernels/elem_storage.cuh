// Device loads and stores of the three storage types, with their rounding policy (elem_round.h).
#pragma once
#include <cuda_fp16.h>

#include <cstdint>

#include "shardtrain/cuda/kernels/elem_round.h"
#include "shardtrain/cuda/kernels/fused_kernels.h"

namespace shardtrain::cuda::kernels {

struct StoreF32 {
  using T = float;
  using R = RoundF32;
  __device__ static float load(T v) { return v; }
  __device__ static T store(float f) { return f; }
};

// Values reach store() already rounded by R, so its conversion is exact.
struct StoreBF16 {
  using T = uint16_t;
  using R = RoundBF16;
  __device__ static float load(T v) { return bf16_bits_to_float(v); }
  __device__ static T store(float f) { return float_to_bf16_bits(f); }
};

struct StoreF16 {
  using T = uint16_t;
  using R = RoundF16;
  __device__ static float load(T v) { return __half2float(__ushort_as_half(v)); }
  __device__ static T store(float f) { return __half_as_ushort(__float2half_rn(f)); }
};

// Calls f with the storage struct of `type`.
template <class F>
cudaError_t dispatch_elem(ElemType type, F&& f) {
  switch (type) {
    case ElemType::kFloat32:
      return f(StoreF32{});
    case ElemType::kBFloat16:
      return f(StoreBF16{});
    case ElemType::kFloat16:
      return f(StoreF16{});
  }
  return cudaErrorInvalidValue;
}

}  // namespace shardtrain::cuda::kernels
