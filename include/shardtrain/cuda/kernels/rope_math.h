// Rotary position embedding of one (x1, x2) pair: element d and d + D/2 of a head, in Hugging
// Face's rotate-half layout, rounded where the composite `x * cos + rotate_half(x) * sin` rounds:
// each product to the storage type (R), then their sum. Shared by the CUDA kernel and the host
// loop.
#pragma once
#include "shardtrain/cuda/kernels/elem_round.h"

namespace shardtrain::cuda::kernels {

// Forward: y1 = x1*c1 - x2*s1, y2 = x2*c2 + x1*s2 (c1, s1 at d; c2, s2 at d + D/2).
template <class R>
ST_HD inline void rope_forward_pair(float x1, float x2, float c1, float c2, float s1, float s2,
                                    float* y1, float* y2) {
  const float a1 = R::round(mul_rn(x1, c1));
  const float b1 = R::round(mul_rn(x2, s1));  // rotate_half's -x2 times s1: the sign is exact
  const float a2 = R::round(mul_rn(x2, c2));
  const float b2 = R::round(mul_rn(x1, s2));
  *y1 = R::round(a1 - b1);
  *y2 = R::round(a2 + b2);
}

// Backward, the transpose of the forward: dx1 = dy1*c1 + dy2*s2, dx2 = dy2*c2 - dy1*s1; rounded as
// autograd rounds the composite (dy*cos and dy*sin each to R, then the two contributions' sum).
// Rotary tables repeat their halves (s1 == s2), so this equals the forward with sin negated; the
// exact transpose is kept so that any table is right.
template <class R>
ST_HD inline void rope_backward_pair(float dy1, float dy2, float c1, float c2, float s1, float s2,
                                     float* dx1, float* dx2) {
  const float a1 = R::round(mul_rn(dy1, c1));
  const float b1 = R::round(mul_rn(dy2, s2));  // y2 = .. + x1*s2
  const float a2 = R::round(mul_rn(dy2, c2));
  const float b2 = R::round(mul_rn(dy1, s1));  // y1 = .. - x2*s1
  *dx1 = R::round(a1 + b1);
  *dx2 = R::round(a2 - b2);
}

}  // namespace shardtrain::cuda::kernels
