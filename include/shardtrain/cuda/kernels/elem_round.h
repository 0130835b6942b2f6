// Rounding of fp32 results to a storage type, on the host and on the device alike: the fused
// kernels round where LibTorch's composite ops round (each op's fp32 result to the tensor's dtype),
// so their results match the composite path bit for bit. No c10 here: nvcc compiles this.
#pragma once
#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define ST_HD __host__ __device__
#else
#define ST_HD
#endif

namespace shardtrain::cuda::kernels {

ST_HD inline uint32_t float_bits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
#endif
}

ST_HD inline float bits_float(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// fp32 -> bf16 bits, round to nearest even; a NaN stays a (quiet) NaN.
ST_HD inline uint16_t float_to_bf16_bits(float f) {
  const uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  const uint32_t lsb = (u >> 16) & 1u;
  return static_cast<uint16_t>((u + 0x7fffu + lsb) >> 16);
}

ST_HD inline float bf16_bits_to_float(uint16_t b) {
  return bits_float(static_cast<uint32_t>(b) << 16);
}

// fp32 rounded to the nearest bf16 value (ties to even), returned as fp32.
ST_HD inline float round_bf16(float f) { return bf16_bits_to_float(float_to_bf16_bits(f)); }

// fp32 rounded to the nearest fp16 value (ties to even, subnormals, overflow to inf), as fp32.
ST_HD inline float round_fp16(float f) {
  const uint32_t u = float_bits(f);
  const uint32_t mag = u & 0x7fffffffu;
  if (mag >= 0x7f800000u) return f;  // inf and NaN pass through
  const float sign = (u >> 31) ? -1.0f : 1.0f;
  const float a = bits_float(mag);
  const int e = static_cast<int>(mag >> 23) - 127;
  // fp16 keeps 11 significant bits down to 2^-14, then a fixed quantum of 2^-24 (subnormals).
  const int q = e < -14 ? -24 : e - 10;
  const float scale_up = bits_float(static_cast<uint32_t>(127 - q) << 23);
  const float scale_down = bits_float(static_cast<uint32_t>(127 + q) << 23);
  const float r = rintf(a * scale_up) * scale_down;  // both scalings are exact powers of two
  if (r > 65504.0f) return sign * INFINITY;
  return sign * r;
}

// The rounding policies the element functions are templated on: one per storage type.
struct RoundF32 {
  ST_HD static float round(float f) { return f; }
};
struct RoundBF16 {
  ST_HD static float round(float f) { return round_bf16(f); }
};
struct RoundF16 {
  ST_HD static float round(float f) { return round_fp16(f); }
};

// A product that nvcc may not fuse with a following add (the composite path rounds it alone).
ST_HD inline float mul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

}  // namespace shardtrain::cuda::kernels
