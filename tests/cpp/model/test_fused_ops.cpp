// The fused RoPE and SwiGLU Functions (model/fused_ops.h) through their host loop, which runs the
// element functions the CUDA kernels run, against the composite ops and autograd: values and
// gradients, fp32, bf16 and fp16, plain and packed rows, llama3-scaled tables.
#include <ATen/ATen.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <limits>
#include <tuple>
#include <vector>

#include "fused_ops_compare.h"
#include "shardtrain/cuda/kernels/rope_math.h"
#include "shardtrain/cuda/kernels/swiglu_math.h"
#include "shardtrain/model/config.h"
#include "shardtrain/model/fused_ops.h"
#include "shardtrain/model/llama.h"
#include "shardtrain/model/token_layout.h"

using namespace shardtrain;
namespace kn = shardtrain::cuda::kernels;
using fused_compare::mismatches;
using fused_compare::rope_mismatches;
using fused_compare::RopeOut;
using fused_compare::run_rope;

namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Floats over the whole range: a stride through every bit pattern, plus ties and edges of both
// types.
std::vector<float> probe_floats() {
  std::vector<float> v;
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 4099)
    v.push_back(from_bits(static_cast<uint32_t>(u)));
  for (uint32_t hi : {0x3f80u, 0x3f81u, 0x4780u, 0x7f7fu, 0x0001u, 0x8001u}) {
    for (uint32_t lo : {0x7fffu, 0x8000u, 0x8001u})
      v.push_back(from_bits(hi << 16 | lo));  // bf16 ties and neighbours
  }
  for (float f : {65504.0f, 65519.99f, 65520.0f, 65536.0f, 0x1p-24f, 0x1p-25f, 0x3p-25f,
                  0x1.ffcp-15f, 0x1.002p0f, 0x1.003p0f})
    for (float s : {1.0f, -1.0f}) v.push_back(s * f);
  v.push_back(std::numeric_limits<float>::infinity());
  v.push_back(std::numeric_limits<float>::quiet_NaN());
  return v;
}

// q, k as decoder_layer has them: [B, T, heads * D] projections viewed [B, heads, T, D].
at::Tensor heads_view(int64_t B, int64_t T, int64_t heads, int64_t D, at::ScalarType dtype) {
  return at::randn({B, T, heads * D}).to(dtype).view({B, T, heads, D}).transpose(1, 2);
}

model::ModelConfig small_config(int64_t head_dim) {
  model::ModelConfig cfg;
  cfg.num_heads = 4;
  cfg.num_kv_heads = 2;
  cfg.hidden_size = 4 * head_dim;
  return cfg;
}

const at::ScalarType kDtypes[] = {at::kFloat, at::kBFloat16, at::kHalf};

}  // namespace

// The portable rounding helpers against c10's conversions, bit for bit, over the whole float range.
TEST(FusedOps, RoundingHelpersMatchC10) {
  int64_t bf16_bad = 0;
  int64_t fp16_bad = 0;
  int64_t n = 0;
  for (float f : probe_floats()) {
    ++n;
    const float want_bf16 = static_cast<float>(c10::BFloat16(f));
    const float want_fp16 = static_cast<float>(c10::Half(f));
    const float got_bf16 = kn::round_bf16(f);
    const float got_fp16 = kn::round_fp16(f);
    const bool nan = std::isnan(f);
    bf16_bad += nan ? !std::isnan(got_bf16) : bits(got_bf16) != bits(want_bf16);
    fp16_bad += nan ? !std::isnan(got_fp16) : bits(got_fp16) != bits(want_fp16);
  }
  EXPECT_GT(n, 1000000);
  EXPECT_EQ(bf16_bad, 0);
  EXPECT_EQ(fp16_bad, 0);
}

// With a table's repeated halves (c1 == c2, s1 == s2) the backward is the forward with sin negated.
TEST(FusedOps, RopeBackwardIsForwardWithSinNegatedForRepeatedHalves) {
  at::manual_seed(1);
  const at::Tensor v = at::randn({4096, 4}).to(at::kBFloat16).to(at::kFloat).contiguous();
  const float* p = v.const_data_ptr<float>();
  int64_t differ = 0;
  for (int64_t i = 0; i < v.size(0); ++i) {
    const float dy1 = p[4 * i], dy2 = p[4 * i + 1], c = p[4 * i + 2], s = p[4 * i + 3];
    float a1, a2, b1, b2;
    kn::rope_backward_pair<kn::RoundBF16>(dy1, dy2, c, c, s, s, &a1, &a2);
    kn::rope_forward_pair<kn::RoundBF16>(dy1, dy2, c, c, -s, -s, &b1, &b2);
    differ += bits(a1) != bits(b1) || bits(a2) != bits(b2);
  }
  EXPECT_EQ(differ, 0);
  // With unequal halves they differ: the backward is the exact transpose, not the shortcut.
  float a1, a2, b1, b2;
  kn::rope_backward_pair<kn::RoundF32>(1.0f, 2.0f, 0.5f, 0.5f, 0.25f, 0.75f, &a1, &a2);
  kn::rope_forward_pair<kn::RoundF32>(1.0f, 2.0f, 0.5f, 0.5f, -0.25f, -0.75f, &b1, &b2);
  EXPECT_EQ(a1, 0.5f + 2.0f * 0.75f);
  EXPECT_NE(a1, b1);
}

// Rotary's [T, D] tables, unpacked rows: fused == composite bit for bit in every dtype, GQA heads.
TEST(FusedOps, RotaryMatchesCompositeBitForBit) {
  const auto cfg = small_config(16);
  for (const auto dtype : kDtypes) {
    at::manual_seed(2);
    const int64_t B = 2, T = 13, D = cfg.head_dim();
    model::Rotary rope(cfg, 64);
    rope.to(at::kCPU, dtype);
    const at::Tensor cos = rope.cos.narrow(0, 0, T), sin = rope.sin.narrow(0, 0, T);
    const at::Tensor q = heads_view(B, T, cfg.num_heads, D, dtype),
                     k = heads_view(B, T, cfg.num_kv_heads, D, dtype);
    const at::Tensor dyq = at::randn(q.sizes()).to(dtype), dyk = at::randn(k.sizes()).to(dtype);
    const RopeOut fused = run_rope(q, k, cos, sin, dyq, dyk, true);
    const RopeOut ref = run_rope(q, k, cos, sin, dyq, dyk, false);
    EXPECT_EQ(rope_mismatches(fused, ref), 0) << dtype;
    EXPECT_GT(fused.q.ne(q).sum().item<int64_t>(), 0) << "the rotation changed q";
  }
}

// Random tables with unequal halves: the backward is the composite's exact transpose.
TEST(FusedOps, RotaryGradientIsTheExactTransposeForAnyTable) {
  for (const auto dtype : kDtypes) {
    at::manual_seed(3);
    const int64_t B = 2, T = 7, D = 8;
    const at::Tensor cos = at::randn({T, D}).to(dtype), sin = at::randn({T, D}).to(dtype);
    const at::Tensor q = heads_view(B, T, 3, D, dtype), k = heads_view(B, T, 1, D, dtype);
    const at::Tensor dyq = at::randn(q.sizes()).to(dtype), dyk = at::randn(k.sizes()).to(dtype);
    EXPECT_EQ(rope_mismatches(run_rope(q, k, cos, sin, dyq, dyk, true),
                              run_rope(q, k, cos, sin, dyq, dyk, false)),
              0)
        << dtype;
  }
}

// fp32 within 1e-6 relative as well (the bound the GPU tests use), and only q's output used:
// k's gradient is zero, q's as the composite's.
TEST(FusedOps, RotaryFp32WithinToleranceAndOneOutputUsed) {
  at::manual_seed(4);
  const auto cfg = small_config(32);
  const int64_t B = 1, T = 9, D = cfg.head_dim();
  model::Rotary rope(cfg, 16);
  const at::Tensor cos = rope.cos.narrow(0, 0, T), sin = rope.sin.narrow(0, 0, T);
  const at::Tensor q0 = heads_view(B, T, 4, D, at::kFloat), k0 = heads_view(B, T, 2, D, at::kFloat);
  at::Tensor q = q0.clone().requires_grad_(), k = k0.clone().requires_grad_();
  auto [qr, kr] = model::fused_rotary(q, k, cos, sin);
  (qr * qr).sum().backward();
  at::Tensor qc = q0.clone().requires_grad_();
  const at::Tensor ref = model::apply_rotary(qc, cos, sin);
  (ref * ref).sum().backward();
  EXPECT_TRUE(at::allclose(qr.detach(), ref.detach(), 1e-6, 1e-7));
  EXPECT_TRUE(at::allclose(q.grad(), qc.grad(), 1e-6, 1e-7));
  EXPECT_TRUE(k.grad().defined());
  EXPECT_EQ(k.grad().abs().sum().item<float>(), 0.0f);
}

// Packed rows (positions restart mid-row): fused with token_layout's gathered [B, 1, T, D] tables
// and fused_rotary_at over the [max_pos, D] tables both equal the composite on the gathered tables.
TEST(FusedOps, PackedRowsMatchGatheredTables) {
  const auto cfg = small_config(16);
  const int64_t B = 2, T = 12, D = cfg.head_dim();
  // Row 0: documents of 5 and 7 tokens; row 1: 3, 3 and 6.
  const at::Tensor positions =
      at::tensor({0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 5, 6, 0, 1, 2, 0, 1, 2, 0, 1, 2, 3, 4, 5},
                 at::kLong)
          .view({B, T});
  for (const auto dtype : kDtypes) {
    at::manual_seed(5);
    model::Rotary rope(cfg, 32);
    rope.to(at::kCPU, dtype);
    const model::TokenLayout layout = model::token_layout(rope, positions, T, at::kCPU, dtype);
    ASSERT_EQ(layout.cos.dim(), 4) << "packed rows take the gathered tables";
    const at::Tensor q = heads_view(B, T, cfg.num_heads, D, dtype),
                     k = heads_view(B, T, cfg.num_kv_heads, D, dtype);
    const at::Tensor dyq = at::randn(q.sizes()).to(dtype), dyk = at::randn(k.sizes()).to(dtype);
    const RopeOut ref = run_rope(q, k, layout.cos, layout.sin, dyq, dyk, false);
    EXPECT_EQ(rope_mismatches(run_rope(q, k, layout.cos, layout.sin, dyq, dyk, true), ref), 0)
        << dtype;
    EXPECT_EQ(rope_mismatches(run_rope(q, k, rope.cos, rope.sin, dyq, dyk, true, positions), ref),
              0)
        << dtype;
    // The layout the fused layers take on CUDA: positions and whole tables, no gathered copy.
    const model::TokenLayout kernel =
        model::token_layout(rope, positions, T, at::kCPU, dtype, /*gather=*/false);
    ASSERT_FALSE(kernel.cos.defined());
    EXPECT_TRUE(kernel.positions.equal(positions));
    EXPECT_EQ(rope_mismatches(run_rope(q, k, kernel.table_cos, kernel.table_sin, dyq, dyk, true,
                                       kernel.positions),
                              ref),
              0)
        << dtype;
    // The unpacked [T, D] tables give another result: the positions matter.
    const RopeOut plain =
        run_rope(q, k, rope.cos.narrow(0, 0, T), rope.sin.narrow(0, 0, T), dyq, dyk, true);
    EXPECT_FALSE(at::equal(plain.q, ref.q)) << dtype;
  }
}

// Llama-3.1's scaled frequencies (rope_scaling llama3) at positions past the original context.
TEST(FusedOps, Llama3ScaledTablesMatchComposite) {
  auto cfg = small_config(32);
  cfg.rope_theta = 500000.0;
  cfg.max_position_embeddings = 16384;
  cfg.rope_scaling.type = "llama3";
  cfg.rope_scaling.factor = 8.0;
  cfg.rope_scaling.low_freq_factor = 1.0;
  cfg.rope_scaling.high_freq_factor = 4.0;
  cfg.rope_scaling.original_max_position_embeddings = 8192;
  cfg.validate();
  const int64_t B = 2, T = 6, D = cfg.head_dim(), max_pos = 12000;
  auto plain_cfg = cfg;
  plain_cfg.rope_scaling = model::RopeScaling();
  EXPECT_FALSE(at::allclose(model::Rotary(cfg, max_pos).cos, model::Rotary(plain_cfg, max_pos).cos))
      << "llama3 scaling changes the tables";
  const at::Tensor positions = at::arange(9000, 9000 + B * T, at::kLong).view({B, T});
  for (const auto dtype : kDtypes) {
    at::manual_seed(6);
    model::Rotary rope(cfg, max_pos);
    rope.to(at::kCPU, dtype);
    const at::Tensor index = positions.flatten();
    const at::Tensor cos = rope.cos.index_select(0, index).view({B, T, D}).unsqueeze(1);
    const at::Tensor sin = rope.sin.index_select(0, index).view({B, T, D}).unsqueeze(1);
    const at::Tensor q = heads_view(B, T, cfg.num_heads, D, dtype),
                     k = heads_view(B, T, cfg.num_kv_heads, D, dtype);
    const at::Tensor dyq = at::randn(q.sizes()).to(dtype), dyk = at::randn(k.sizes()).to(dtype);
    const RopeOut ref = run_rope(q, k, cos, sin, dyq, dyk, false);
    EXPECT_EQ(rope_mismatches(run_rope(q, k, rope.cos, rope.sin, dyq, dyk, true, positions), ref),
              0)
        << dtype;
    EXPECT_EQ(rope_mismatches(run_rope(q, k, cos, sin, dyq, dyk, true), ref), 0) << dtype;
  }
}

namespace {
struct SwigluOut {
  at::Tensor out, dgate, dup;
};

SwigluOut run_swiglu(const at::Tensor& g0, const at::Tensor& u0, const at::Tensor& dy, bool fused) {
  at::Tensor g = g0.clone().requires_grad_();
  at::Tensor u = u0.clone().requires_grad_();
  const at::Tensor out = fused ? model::fused_swiglu(g, u) : model::activation("silu", g) * u;
  out.backward(dy);
  return {out.detach(), g.grad(), u.grad()};
}
}  // namespace

// SwiGLU against silu(gate) * up and autograd over 2^20 elements. fp32: within 1e-6 relative
// (ATen's vectorized exp, Sleef's, and libm's expf differ by an fp32 ulp on ~4% of them). bf16 and
// fp16: at most one ulp, and only where that difference crosses a rounding boundary of the storage
// type. Measured here: bf16 0 / 0 / 0 (out / dgate / dup), fp16 0 / 14 / 0; the bounds leave
// headroom for another libm, since exactness rests on two exp implementations agreeing.
TEST(FusedOps, SwigluMatchesComposite) {
  const int64_t n = 1 << 20;
  for (const auto dtype : kDtypes) {
    at::manual_seed(7);
    const at::Tensor g = (at::randn({n / 1024, 1024}) * 4).to(dtype),
                     u = at::randn({n / 1024, 1024}).to(dtype);
    const at::Tensor dy = at::randn({n / 1024, 1024}).to(dtype);
    const SwigluOut fused = run_swiglu(g, u, dy, true);
    const SwigluOut ref = run_swiglu(g, u, dy, false);
    if (dtype == at::kFloat) {
      EXPECT_TRUE(at::allclose(fused.out, ref.out, 1e-6, 1e-7));
      EXPECT_TRUE(at::allclose(fused.dgate, ref.dgate, 1e-6, 1e-7));
      EXPECT_TRUE(at::allclose(fused.dup, ref.dup, 1e-6, 1e-7));
    }
    const int64_t out_bad = mismatches(fused.out, ref.out);
    const int64_t dgate_bad = mismatches(fused.dgate, ref.dgate);
    const int64_t dup_bad = mismatches(fused.dup, ref.dup);
    std::cout << "swiglu " << dtype << " mismatches of " << n << ": out " << out_bad << ", dgate "
              << dgate_bad << ", dup " << dup_bad << "\n";
    const int64_t bound = dtype == at::kBFloat16 ? 4 : dtype == at::kHalf ? 64 : n;
    EXPECT_LE(out_bad, bound) << dtype;
    EXPECT_LE(dgate_bad, bound) << dtype;
    EXPECT_LE(dup_bad, bound) << dtype;
  }
}

namespace {
struct MergedOut {
  at::Tensor out, dgate_up;
};

// fused_swiglu_merged, or the composite silu(gate_up[..., :F]) * gate_up[..., F:] with autograd
// (the narrow views' gradients summed into one [..., 2F]). dy undefined: out.sum()'s expanded one.
MergedOut run_swiglu_merged(const at::Tensor& gu0, const at::Tensor& dy, bool fused) {
  at::Tensor gu = gu0.clone().requires_grad_();
  const int64_t F = gu.size(-1) / 2;
  const at::Tensor out = fused
                             ? model::fused_swiglu_merged(gu)
                             : model::activation("silu", gu.narrow(-1, 0, F)) * gu.narrow(-1, F, F);
  if (dy.defined()) {
    out.backward(dy);
  } else {
    out.sum().backward();
  }
  return {out.detach(), gu.grad()};
}

// Same dtype, shape and bits (a -0 is not a +0 here).
bool bit_equal(const at::Tensor& a, const at::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  const auto as_int = [](const at::Tensor& t) {
    return t.contiguous().view(t.element_size() == 4 ? at::kInt : at::kShort);
  };
  return at::equal(as_int(a), as_int(b));
}
}  // namespace

// The merged gate/up projection's SwiGLU against the composite over narrow views and autograd,
// with SwigluMatchesComposite's shapes, seed and bounds; and bit for bit fused_swiglu on the two
// halves (values, and the gradient as the cat of fused_swiglu's two). Measured here: bf16 0 / 0 / 0
// (out / dgate half / dup half), fp16 0 / 14 / 0, as fused_swiglu's.
TEST(FusedOps, SwigluMergedMatchesCompositeAndUnmerged) {
  const int64_t rows = 1024, F = 1024, n = rows * F;
  for (const auto dtype : kDtypes) {
    at::manual_seed(7);
    const at::Tensor g = (at::randn({rows, F}) * 4).to(dtype), u = at::randn({rows, F}).to(dtype);
    const at::Tensor dy = at::randn({rows, F}).to(dtype);
    const at::Tensor gu =
        at::cat({g, u}, -1).view({2, rows / 2, 2 * F});  // [B, T, 2F], the GEMM's output
    const at::Tensor dy3 = dy.view({2, rows / 2, F});
    const MergedOut fused = run_swiglu_merged(gu, dy3, true);
    const MergedOut ref = run_swiglu_merged(gu, dy3, false);
    ASSERT_EQ(fused.out.sizes(), (at::IntArrayRef{2, rows / 2, F}));
    ASSERT_EQ(fused.dgate_up.sizes(), gu.sizes());
    const at::Tensor fdg = fused.dgate_up.narrow(-1, 0, F), fdu = fused.dgate_up.narrow(-1, F, F);
    const at::Tensor rdg = ref.dgate_up.narrow(-1, 0, F), rdu = ref.dgate_up.narrow(-1, F, F);
    if (dtype == at::kFloat) {
      EXPECT_TRUE(at::allclose(fused.out, ref.out, 1e-6, 1e-7));
      EXPECT_TRUE(at::allclose(fused.dgate_up, ref.dgate_up, 1e-6, 1e-7));
    }
    const int64_t out_bad = mismatches(fused.out, ref.out);
    const int64_t dgate_bad = mismatches(fdg, rdg);
    const int64_t dup_bad = mismatches(fdu, rdu);
    std::cout << "swiglu_merged " << dtype << " mismatches of " << n << ": out " << out_bad
              << ", dgate " << dgate_bad << ", dup " << dup_bad << "\n";
    const int64_t bound = dtype == at::kBFloat16 ? 4 : dtype == at::kHalf ? 64 : n;
    EXPECT_LE(out_bad, bound) << dtype;
    EXPECT_LE(dgate_bad, bound) << dtype;
    EXPECT_LE(dup_bad, bound) << dtype;
    // The unmerged Function on the halves: the same element maths, so the same bits.
    const SwigluOut split = run_swiglu(g, u, dy, true);
    EXPECT_TRUE(bit_equal(fused.out.view({rows, F}), split.out)) << dtype;
    EXPECT_TRUE(
        bit_equal(fused.dgate_up.view({rows, 2 * F}), at::cat({split.dgate, split.dup}, -1)))
        << dtype;
  }
}

// Odd F (no 16-byte packs on CUDA), a 1-D [2F] input and an expanded (stride 0) output gradient:
// the composite's values and gradient, and fused_swiglu's bits.
TEST(FusedOps, SwigluMergedOddWidthsAndShapes) {
  for (const auto dtype : kDtypes) {
    for (const std::vector<int64_t>& shape :
         {std::vector<int64_t>{3, 5, 2 * 37}, std::vector<int64_t>{2 * 7},
          std::vector<int64_t>{4, 2 * 1}}) {
      at::manual_seed(8);
      const at::Tensor gu = (at::randn(shape) * 3).to(dtype);
      const int64_t F = shape.back() / 2;
      std::vector<int64_t> out_shape = shape;
      out_shape.back() = F;
      const at::Tensor dy = at::randn(out_shape).to(dtype);
      for (const at::Tensor& d : {dy, at::Tensor()}) {
        const MergedOut fused = run_swiglu_merged(gu, d, true);
        const MergedOut ref = run_swiglu_merged(gu, d, false);
        // SwigluMergedMatchesCompositeAndUnmerged's bounds: fp32 within 1e-6, bf16 and fp16 at most
        // one ulp.
        if (dtype == at::kFloat) {
          EXPECT_TRUE(at::allclose(fused.out, ref.out, 1e-6, 1e-7)) << " F " << F;
          EXPECT_TRUE(at::allclose(fused.dgate_up, ref.dgate_up, 1e-6, 1e-7)) << " F " << F;
        } else {
          const int64_t bound = dtype == at::kBFloat16 ? 4 : 64;
          EXPECT_LE(mismatches(fused.out, ref.out), bound) << dtype << " F " << F;
          EXPECT_LE(mismatches(fused.dgate_up, ref.dgate_up), bound) << dtype << " F " << F;
        }
        const SwigluOut split =
            run_swiglu(gu.narrow(-1, 0, F).contiguous(), gu.narrow(-1, F, F).contiguous(),
                       d.defined() ? d : at::ones(out_shape, dtype), true);
        EXPECT_TRUE(bit_equal(fused.out, split.out)) << dtype << " F " << F;
        EXPECT_TRUE(bit_equal(fused.dgate_up, at::cat({split.dgate, split.dup}, -1)))
            << dtype << " F " << F;
      }
    }
  }
}

TEST(FusedOps, SupportAndAvailability) {
  EXPECT_TRUE(model::fused_swiglu_supports("silu"));
  EXPECT_TRUE(model::fused_swiglu_supports("swish"));
  EXPECT_FALSE(model::fused_swiglu_supports("gelu"));
  EXPECT_FALSE(model::fused_swiglu_supports("relu"));
  EXPECT_FALSE(model::fused_kernels_available(at::ones({2})));  // a CPU tensor takes the host loop
}

TEST(FusedOps, BadInputsAreRefused) {
  const at::Tensor q = at::randn({1, 2, 3, 4}), k = at::randn({1, 1, 3, 4}),
                   cos = at::randn({3, 4});
  EXPECT_THROW(model::fused_rotary(q, k.to(at::kBFloat16), cos, cos), c10::Error);  // dtypes differ
  EXPECT_THROW(model::fused_rotary(q, k, cos.narrow(0, 0, 2), cos.narrow(0, 0, 2)),
               c10::Error);  // T differs
  EXPECT_THROW(model::fused_rotary(at::randn({1, 2, 3, 5}), at::randn({1, 1, 3, 5}),
                                   at::randn({3, 5}), at::randn({3, 5})),
               c10::Error);  // odd head_dim
  EXPECT_THROW(model::fused_rotary_at(q, k, cos, cos, at::full({1, 3}, 3, at::kLong)),
               c10::Error);  // past the table
  EXPECT_THROW(model::fused_swiglu(at::randn({4}), at::randn({5})), c10::Error);
  EXPECT_THROW(model::fused_swiglu(at::randn({4}).to(at::kDouble), at::randn({4}).to(at::kDouble)),
               c10::Error);
  EXPECT_THROW(model::fused_swiglu_merged(at::randn({4, 7})), c10::Error);  // odd last dimension
  EXPECT_THROW(model::fused_swiglu_merged(at::randn({8, 4}).t()), c10::Error);  // not contiguous
  EXPECT_THROW(model::fused_swiglu_merged(at::randn({4, 16}).narrow(-1, 0, 8)),
               c10::Error);  // rows strided
  EXPECT_THROW(model::fused_swiglu_merged(at::randn({4, 8}).to(at::kDouble)), c10::Error);
  EXPECT_THROW(model::fused_swiglu_merged(at::ones(at::IntArrayRef{})),
               c10::Error);  // no last dimension
  EXPECT_NO_THROW(model::fused_swiglu_merged(at::randn({4, 8})));
}
