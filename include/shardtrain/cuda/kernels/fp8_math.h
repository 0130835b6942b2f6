// Float8 of one element, on the host and on the device alike: the scale from an amax, the
// saturating cast to e4m3fn or e5m2 (round to nearest even, as PyTorch's float8 dtypes round) and
// back. The fp8 cast kernels and the composite LibTorch path (model/fp8.h) compute the same bits;
// tests compare these functions with torch.float8_e4m3fn and torch.float8_e5m2 bit for bit.
#pragma once
#include "shardtrain/cuda/kernels/elem_round.h"

namespace shardtrain::cuda::kernels {

// e4m3fn: 4 exponent bits (bias 7), 3 mantissa bits, no infinities, 0x7f NaN, largest 448.
// e5m2: 5 exponent bits (bias 15), 2 mantissa bits, IEEE-like infinities, largest 57344.
enum class Fp8Format : int { kE4M3, kE5M2 };

ST_HD inline float fp8_max(Fp8Format f) { return f == Fp8Format::kE4M3 ? 448.0f : 57344.0f; }

// Below this amax the scale stops growing (torchao's EPS): an all-zero tensor stays zero.
constexpr float kFp8AmaxFloor = 1e-12f;

// The quantising scale: fp8_max / amax, so the largest magnitude maps to the format's largest. A
// NaN amax gives a NaN scale (torch.clamp_min keeps NaN), so a NaN input is not hidden.
ST_HD inline float fp8_scale(float amax, Fp8Format f) {
  return fp8_max(f) / (amax < kFp8AmaxFloor ? kFp8AmaxFloor : amax);
}

// |v| clamped to the format's range; NaN stays NaN (torch.clamp's behaviour, which fminf lacks).
ST_HD inline float fp8_saturate(float v, Fp8Format f) {
  const float m = fp8_max(f);
  return v > m ? m : (v < -m ? -m : v);
}

// fp32 -> fp8 bits, round to nearest even. Values past the format's range become NaN (e4m3fn)
// or infinity (e5m2), as PyTorch's conversions do; fp8_quantize saturates first.
ST_HD inline uint8_t fp8_encode(float v, Fp8Format f) {
  const int mant = f == Fp8Format::kE4M3 ? 3 : 2;
  const int bias = f == Fp8Format::kE4M3 ? 7 : 15;
  const uint32_t bits = float_bits(v);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  const uint32_t a_bits = bits & 0x7fffffffu;
  const float a = bits_float(a_bits);
  if (f == Fp8Format::kE4M3) {
    if (!(a < 480.0f)) return sign | 0x7fu;  // 480 rounds past 448: NaN, as are inf and NaN
  } else {
    if (a_bits > 0x7f800000u) return sign | 0x7fu;  // NaN
    if (!(a < 61440.0f)) return sign | 0x7cu;       // rounds past 57344: infinity
  }
  const float min_normal = ldexpf(1.0f, 1 - bias);
  if (a < min_normal) {
    // Subnormal: a multiple of 2^(1 - bias - mant), rounded to nearest even. The product is exact
    // (a power of two) and rintf rounds half to even in the default rounding mode.
    return sign | static_cast<uint8_t>(rintf(ldexpf(a, bias - 1 + mant)));
  }
  // Normal: round the fp32 mantissa at bit (23 - mant), ties to even, then rebias the exponent.
  const int drop = 23 - mant;
  const uint32_t odd = (a_bits >> drop) & 1u;
  const uint32_t rounded = (a_bits + ((1u << (drop - 1)) - 1u) + odd) >> drop;
  return sign | static_cast<uint8_t>(rounded - (static_cast<uint32_t>(127 - bias) << mant));
}

// fp8 bits -> fp32 (exact).
ST_HD inline float fp8_decode(uint8_t code, Fp8Format f) {
  const int mant = f == Fp8Format::kE4M3 ? 3 : 2;
  const int bias = f == Fp8Format::kE4M3 ? 7 : 15;
  const float s = (code & 0x80u) ? -1.0f : 1.0f;
  const int e = (code & 0x7fu) >> mant;
  const int m = code & ((1 << mant) - 1);
  if (f == Fp8Format::kE4M3 && (code & 0x7fu) == 0x7fu) return bits_float(0x7fc00000u);
  if (f == Fp8Format::kE5M2 && e == 31)
    return m == 0 ? s * bits_float(0x7f800000u) : bits_float(0x7fc00000u);
  if (e == 0) return s * ldexpf(static_cast<float>(m), 1 - bias - mant);
  return s * ldexpf(static_cast<float>((1 << mant) + m), e - bias - mant);
}

// The column-wise cast's amax pass splits rows across the grid: a block reduces a slab of
// kColwiseSlabRows rows of 32 columns into the columns' amax (an atomic max), so a [tokens, 4096]
// input runs cols/32 x rows/slab blocks (4,096 at 8,192 tokens), not one block per 32 columns
// walking every row (128 blocks: a tenth of an H100's SMs busy).
constexpr int64_t kColwiseSlabRows = 256;
ST_HD inline int64_t colwise_amax_blocks(int64_t rows, int64_t cols) {
  return ((cols + 31) / 32) * ((rows + kColwiseSlabRows - 1) / kColwiseSlabRows);
}

// One element quantised with `scale`: saturate(v * scale), then the cast.
ST_HD inline uint8_t fp8_quantize(float v, float scale, Fp8Format f) {
  return fp8_encode(fp8_saturate(v * scale, f), f);
}

}  // namespace shardtrain::cuda::kernels
