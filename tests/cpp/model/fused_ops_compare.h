// What the fused ops' CPU and GPU tests share: counting elements apart (in 16-bit storage steps
// for bf16 and fp16), and one rotary run, fused or composite, with its gradients.
#pragma once
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <cstdint>
#include <tuple>

#include "shardtrain/model/fused_ops.h"
#include "shardtrain/model/llama.h"

namespace fused_compare {

// How many 16-bit steps apart two bf16 or fp16 tensors are, element by element (+0 and -0 alike).
inline at::Tensor ulps16(const at::Tensor& a, const at::Tensor& b) {
  const auto ordered = [](const at::Tensor& x) {
    const at::Tensor k = x.cpu().contiguous().view(at::kShort).to(at::kInt);
    return at::where(k < 0, -32768 - k, k);
  };
  return (ordered(a) - ordered(b)).abs();
}

// Elements of a and b that differ; for 16-bit types also asserts no difference exceeds max_ulps.
inline int64_t mismatches(const at::Tensor& a, const at::Tensor& b, int64_t max_ulps = 1) {
  EXPECT_EQ(a.sizes(), b.sizes());
  EXPECT_EQ(a.scalar_type(), b.scalar_type());
  if (a.scalar_type() == at::kFloat) return a.cpu().ne(b.cpu()).sum().item<int64_t>();
  const at::Tensor d = ulps16(a, b);
  EXPECT_LE(d.max().item<int64_t>(), max_ulps);
  return d.gt(0).sum().item<int64_t>();
}

struct RopeOut {
  at::Tensor q, k, dq, dk;
};

// fused: fused_rotary (positions undefined) or fused_rotary_at; else the composite apply_rotary.
inline RopeOut run_rope(const at::Tensor& q0, const at::Tensor& k0, const at::Tensor& cos,
                        const at::Tensor& sin, const at::Tensor& dyq, const at::Tensor& dyk,
                        bool fused, const at::Tensor& positions = {}) {
  at::Tensor q = q0.detach().clone().requires_grad_();  // clone keeps the transposed strides
  at::Tensor k = k0.detach().clone().requires_grad_();
  at::Tensor qr;
  at::Tensor kr;
  if (fused && positions.defined()) {
    std::tie(qr, kr) = shardtrain::model::fused_rotary_at(q, k, cos, sin, positions);
  } else if (fused) {
    std::tie(qr, kr) = shardtrain::model::fused_rotary(q, k, cos, sin);
  } else {
    qr = shardtrain::model::apply_rotary(q, cos, sin);
    kr = shardtrain::model::apply_rotary(k, cos, sin);
  }
  torch::autograd::backward({qr, kr}, {dyq, dyk});
  return {qr.detach(), kr.detach(), q.grad(), k.grad()};
}

// Mismatched elements of the four results (values of q, k; gradients of q, k).
inline int64_t rope_mismatches(const RopeOut& a, const RopeOut& b) {
  return mismatches(a.q, b.q) + mismatches(a.k, b.k) + mismatches(a.dq, b.dq) +
         mismatches(a.dk, b.dk);
}

}  // namespace fused_compare
