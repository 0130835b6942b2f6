// The fused RoPE and SwiGLU CUDA kernels (model/fused_ops.h) against the composite ops on CUDA and
// against their own host loop: values and gradients, fp32, bf16 and fp16, plain and packed rows.
// Skipped without a GPU.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

#include <cstdint>
#include <tuple>

#include "../model/fused_ops_compare.h"
#include "gpu_skip.h"
#include "shardtrain/model/config.h"
#include "shardtrain/model/fused_ops.h"
#include "shardtrain/model/llama.h"
#include "shardtrain/model/token_layout.h"

using namespace shardtrain;

namespace {

const at::ScalarType kGpuDtypes[] = {at::kFloat, at::kBFloat16, at::kHalf};

// Elements more than max_ulps storage steps apart fail the caller's EXPECT (fp32: beyond 1e-6);
// returns how many differ.
int64_t gpu_mismatches(const at::Tensor& a, const at::Tensor& b, int64_t max_ulps = 1) {
  if (a.scalar_type() == at::kFloat) {
    EXPECT_TRUE(at::allclose(a.cpu(), b.cpu(), 1e-6, 1e-7));
  }
  return fused_compare::mismatches(a, b, max_ulps);
}

using GpuRope = fused_compare::RopeOut;
using fused_compare::rope_mismatches;
using fused_compare::run_rope;

at::Tensor gpu_heads(int64_t B, int64_t T, int64_t heads, int64_t D, at::ScalarType dtype) {
  return at::randn({B, T, heads * D}).to(at::kCUDA, dtype).view({B, T, heads, D}).transpose(1, 2);
}

model::ModelConfig gpu_config() {
  model::ModelConfig cfg;
  cfg.num_heads = 8;
  cfg.num_kv_heads = 2;
  cfg.hidden_size = 8 * 64;
  return cfg;
}

}  // namespace

// Unpacked rows, decoder_layer's transposed views: the kernel against the composite on CUDA and
// against the host loop, bit for bit; the output keeps the input's strides.
TEST(GpuFused, RotaryMatchesCompositeAndHostLoop) {
  SKIP_WITHOUT_GPU();
  const auto cfg = gpu_config();
  const int64_t B = 3, T = 77, D = cfg.head_dim();
  for (const auto dtype : kGpuDtypes) {
    at::manual_seed(11);
    model::Rotary rope(cfg, 128);
    rope.to(at::kCUDA, dtype);
    const at::Tensor cos = rope.cos.narrow(0, 0, T), sin = rope.sin.narrow(0, 0, T);
    const at::Tensor q = gpu_heads(B, T, cfg.num_heads, D, dtype),
                     k = gpu_heads(B, T, cfg.num_kv_heads, D, dtype);
    const at::Tensor dyq = at::randn(q.sizes()).to(at::kCUDA, dtype),
                     dyk = at::randn(k.sizes()).to(at::kCUDA, dtype);
    ASSERT_TRUE(model::fused_kernels_available(q));
    const GpuRope fused = run_rope(q, k, cos, sin, dyq, dyk, true);
    EXPECT_EQ(rope_mismatches(fused, run_rope(q, k, cos, sin, dyq, dyk, false)), 0) << dtype;
    const GpuRope host =
        run_rope(q.cpu(), k.cpu(), cos.cpu(), sin.cpu(), dyq.cpu(), dyk.cpu(), true);
    EXPECT_EQ(rope_mismatches(fused, host), 0) << dtype;
    EXPECT_EQ(fused.q.strides(), q.strides()) << "no copy out of decoder_layer's layout";
  }
}

// Packed rows: the gathered [B, 1, T, D] tables and the positions over the [max_pos, D] tables.
TEST(GpuFused, PackedRowsMatchComposite) {
  SKIP_WITHOUT_GPU();
  const auto cfg = gpu_config();
  const int64_t B = 2, T = 64, D = cfg.head_dim();
  at::Tensor positions = at::arange(T, at::kLong).repeat({B, 1});
  positions.select(0, 0)
      .narrow(0, 20, T - 20)
      .copy_(at::arange(T - 20, at::kLong));  // row 0: documents of 20 and 44
  positions.select(0, 1)
      .narrow(0, 50, T - 50)
      .copy_(at::arange(T - 50, at::kLong));  // row 1: 50 and 14
  for (const auto dtype : kGpuDtypes) {
    at::manual_seed(12);
    model::Rotary rope(cfg, 256);
    rope.to(at::kCUDA, dtype);
    const model::TokenLayout layout = model::token_layout(rope, positions, T, at::kCUDA, dtype);
    ASSERT_EQ(layout.cos.dim(), 4);
    const at::Tensor q = gpu_heads(B, T, cfg.num_heads, D, dtype),
                     k = gpu_heads(B, T, cfg.num_kv_heads, D, dtype);
    const at::Tensor dyq = at::randn(q.sizes()).to(at::kCUDA, dtype),
                     dyk = at::randn(k.sizes()).to(at::kCUDA, dtype);
    const GpuRope ref = run_rope(q, k, layout.cos, layout.sin, dyq, dyk, false);
    EXPECT_EQ(rope_mismatches(run_rope(q, k, layout.cos, layout.sin, dyq, dyk, true), ref), 0)
        << dtype;
    const at::Tensor pos = positions.to(at::kCUDA);
    EXPECT_EQ(rope_mismatches(run_rope(q, k, rope.cos, rope.sin, dyq, dyk, true, pos), ref), 0)
        << dtype;
  }
}

namespace {
struct GpuSwiglu {
  at::Tensor out, dgate, dup;
};

GpuSwiglu gpu_swiglu(const at::Tensor& g0, const at::Tensor& u0, const at::Tensor& dy, bool fused) {
  at::Tensor g = g0.detach().clone().requires_grad_();
  at::Tensor u = u0.detach().clone().requires_grad_();
  const at::Tensor out = fused ? model::fused_swiglu(g, u) : model::activation("silu", g) * u;
  out.backward(dy);
  return {out.detach(), g.grad(), u.grad()};
}
}  // namespace

// SwiGLU: bf16 and fp16 at most one storage ulp from the composite and from the host loop, on at
// most 0.1% of the elements (the kernel writes the composite's expressions; only exp may differ).
// n is odd, so the vectorized kernel's tail runs too.
TEST(GpuFused, SwigluMatchesCompositeAndHostLoop) {
  SKIP_WITHOUT_GPU();
  const int64_t n = 3 * 1024 * 1024 + 13;
  for (const auto dtype : kGpuDtypes) {
    at::manual_seed(13);
    const at::Tensor g = (at::randn({n}) * 4).to(at::kCUDA, dtype),
                     u = at::randn({n}).to(at::kCUDA, dtype);
    const at::Tensor dy = at::randn({n}).to(at::kCUDA, dtype);
    const GpuSwiglu fused = gpu_swiglu(g, u, dy, true);
    const GpuSwiglu ref = gpu_swiglu(g, u, dy, false);
    const GpuSwiglu host = gpu_swiglu(g.cpu(), u.cpu(), dy.cpu(), true);
    // fp32: within 1e-6 (gpu_mismatches); CUDA's expf and libm's differ by an ulp too often to
    // count.
    const int64_t bound = dtype == at::kFloat ? n : n / 1000;
    for (const GpuSwiglu* other : {&ref, &host}) {
      EXPECT_LE(gpu_mismatches(fused.out, other->out), bound) << dtype;
      EXPECT_LE(gpu_mismatches(fused.dgate, other->dgate), bound) << dtype;
      EXPECT_LE(gpu_mismatches(fused.dup, other->dup), bound) << dtype;
    }
  }
}

// Pointers off 16-byte alignment take the one-element kernel: the same results.
TEST(GpuFused, SwigluUnalignedMatchesAligned) {
  SKIP_WITHOUT_GPU();
  for (const auto dtype : kGpuDtypes) {
    at::manual_seed(14);
    const int64_t n = 100003;
    const at::Tensor g0 = at::randn({n + 1}).to(at::kCUDA, dtype),
                     u0 = at::randn({n + 1}).to(at::kCUDA, dtype);
    const at::Tensor dy = at::randn({n}).to(at::kCUDA, dtype);
    // Views one element in: gate and up (and so the saved tensors backward reads) are misaligned.
    at::Tensor gb = g0.clone().requires_grad_(), ub = u0.clone().requires_grad_();
    const at::Tensor g1 = gb.narrow(0, 1, n), u1 = ub.narrow(0, 1, n);
    ASSERT_NE(reinterpret_cast<uintptr_t>(g1.const_data_ptr()) % 16, 0u);
    const at::Tensor out = model::fused_swiglu(g1, u1);
    out.backward(dy);
    const GpuSwiglu aligned =
        gpu_swiglu(g0.narrow(0, 1, n).clone(), u0.narrow(0, 1, n).clone(), dy, true);
    EXPECT_TRUE(at::equal(out.detach(), aligned.out)) << dtype;
    EXPECT_TRUE(at::equal(gb.grad().narrow(0, 1, n), aligned.dgate)) << dtype;
    EXPECT_TRUE(at::equal(ub.grad().narrow(0, 1, n), aligned.dup)) << dtype;
  }
}

namespace {
struct GpuMerged {
  at::Tensor out, dgate_up;
};

// fused_swiglu_merged, or the composite over gate_up's two halves with autograd.
GpuMerged gpu_swiglu_merged(const at::Tensor& gu0, const at::Tensor& dy, bool fused) {
  at::Tensor gu = gu0.detach().clone().requires_grad_();
  const int64_t F = gu.size(-1) / 2;
  const at::Tensor out = fused
                             ? model::fused_swiglu_merged(gu)
                             : model::activation("silu", gu.narrow(-1, 0, F)) * gu.narrow(-1, F, F);
  out.backward(dy);
  return {out.detach(), gu.grad()};
}

bool gpu_bit_equal(const at::Tensor& a, const at::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  const auto as_int = [](const at::Tensor& t) {
    return t.cpu().contiguous().view(t.element_size() == 4 ? at::kInt : at::kShort);
  };
  return at::equal(as_int(a), as_int(b));
}
}  // namespace

// The merged gate/up projection: the kernel against the composite on CUDA and the host loop (as
// SwigluMatchesCompositeAndHostLoop bounds them), and bit for bit the unmerged kernel on the
// halves. F = 1376 takes 16-byte packs in every dtype, 1377 one element at a time, 4 packs for fp32
// only.
TEST(GpuFused, SwigluMergedMatchesCompositeHostLoopAndUnmerged) {
  SKIP_WITHOUT_GPU();
  for (const int64_t F : {int64_t{1376}, int64_t{1377}, int64_t{4}}) {
    for (const auto dtype : kGpuDtypes) {
      at::manual_seed(15);
      const int64_t B = 3, T = 517, n = B * T * F;
      const at::Tensor g = (at::randn({B, T, F}) * 4).to(at::kCUDA, dtype),
                       u = at::randn({B, T, F}).to(at::kCUDA, dtype);
      const at::Tensor dy = at::randn({B, T, F}).to(at::kCUDA, dtype);
      const at::Tensor gu = at::cat({g, u}, -1);
      const GpuMerged fused = gpu_swiglu_merged(gu, dy, true);
      const GpuMerged ref = gpu_swiglu_merged(gu, dy, false);
      const GpuMerged host = gpu_swiglu_merged(gu.cpu(), dy.cpu(), true);
      ASSERT_TRUE(fused.out.is_cuda());
      const int64_t bound = dtype == at::kFloat ? n : n / 1000;
      for (const GpuMerged* other : {&ref, &host}) {
        EXPECT_LE(gpu_mismatches(fused.out, other->out), bound) << dtype << " F " << F;
        EXPECT_LE(gpu_mismatches(fused.dgate_up.narrow(-1, 0, F), other->dgate_up.narrow(-1, 0, F)),
                  bound)
            << dtype << " F " << F;
        EXPECT_LE(gpu_mismatches(fused.dgate_up.narrow(-1, F, F), other->dgate_up.narrow(-1, F, F)),
                  bound)
            << dtype << " F " << F;
      }
      const GpuSwiglu split = gpu_swiglu(g, u, dy, true);
      EXPECT_TRUE(gpu_bit_equal(fused.out, split.out)) << dtype << " F " << F;
      EXPECT_TRUE(gpu_bit_equal(fused.dgate_up, at::cat({split.dgate, split.dup}, -1)))
          << dtype << " F " << F;
    }
  }
}

// gate_up contiguous but one element off 16-byte alignment takes the one-element kernel: the same
// bits.
TEST(GpuFused, SwigluMergedUnalignedMatchesAligned) {
  SKIP_WITHOUT_GPU();
  for (const auto dtype : kGpuDtypes) {
    at::manual_seed(16);
    const int64_t rows = 301, F = 512;
    const at::Tensor flat = at::randn({rows * 2 * F + 1}).to(at::kCUDA, dtype);
    const at::Tensor dy = at::randn({rows, F}).to(at::kCUDA, dtype);
    at::Tensor base = flat.clone().requires_grad_();
    const at::Tensor gu1 = base.narrow(0, 1, rows * 2 * F).view({rows, 2 * F});
    ASSERT_TRUE(gu1.is_contiguous());
    ASSERT_NE(reinterpret_cast<uintptr_t>(gu1.const_data_ptr()) % 16, 0u);
    const at::Tensor out = model::fused_swiglu_merged(gu1);
    out.backward(dy);
    const GpuMerged aligned =
        gpu_swiglu_merged(flat.narrow(0, 1, rows * 2 * F).view({rows, 2 * F}).clone(), dy, true);
    EXPECT_TRUE(gpu_bit_equal(out.detach(), aligned.out)) << dtype;
    EXPECT_TRUE(
        gpu_bit_equal(base.grad().narrow(0, 1, rows * 2 * F).view({rows, 2 * F}), aligned.dgate_up))
        << dtype;
  }
}
