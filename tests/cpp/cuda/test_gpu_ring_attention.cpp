// Ring attention's blocks on the GPU (model/ring_attention.h), in bf16 and fp16 with grouped-query
// heads: block_attention through flash's kernel (no mask), the memory-efficient kernel and the math
// path (each forced, with a mask of all true), each against at::scaled_dot_product_attention in
// fp32 over the same values (K/V repeated for GQA) and its log-sum-exp against one of the scaled
// scores computed here; two halves' blocks merged by merge_block, as the ring lays them out,
// against the whole block; block_attention_backward given the whole row's out and lse against
// autograd through SDPA, whole and as the ring's blocks; the masked kernel on document and
// sliding-window masks against SDPA with the same mask, forward and backward.
// GpuRing.TimesFlashAndMathPaths prints each path's time (bench/gpu_suite.sh --parts ring reads the
// "ring timing:" lines). Skipped, with the reason printed, without a GPU.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "gpu_skip.h"
#include "gpu_support.h"
#include "shardtrain/model/masked_block.h"
#include "shardtrain/model/ring_attention.h"
#ifdef SHARDTRAIN_TORCH_CUDA
#include "shardtrain/cuda/cuda_handles.h"
#endif

using namespace shardtrain;
using model::BlockGrads;
using model::BlockOut;

namespace {

using Path = model::BlockPath;

struct Shape {
  int64_t B, nh, nkv, L, D;
};
// Grouped-query heads (4 query heads a K/V head), both head sizes, two lengths.
const std::vector<Shape> kShapes = {{2, 8, 2, 256, 128}, {2, 8, 2, 512, 64}, {2, 8, 2, 512, 128}};
const std::vector<at::ScalarType> kTypes = {at::kBFloat16, at::kHalf};

// Tolerances on |a - b| / |b| over the whole tensor: flash rounds its probabilities and output to
// the element type (2^-9 relative in bf16, 2^-11 in fp16) and the backward's dS before its GEMMs;
// that rounding emulated in fp32 at L=512, D=64 gives 2.2e-3 (bf16) and 2.8e-4 (fp16) on out,
// 2.5e-3 and 3.1e-4 on dq, and the math path (fp32 over the rounded values; the backward's dsum
// from the rounded out) stays under 4% of the bounds on the CPU. A wrong scale, causal alignment
// or K/V head is off by 10% or more.
double out_tol(at::ScalarType t) { return t == at::kBFloat16 ? 1.5e-2 : 4e-3; }
double grad_tol(at::ScalarType t) { return t == at::kBFloat16 ? 2.5e-2 : 8e-3; }
// The log-sum-exp is fp32 on both paths over the same rounded inputs.
constexpr double kLseTol = 1e-3;

// fp32 matmuls in full fp32 while a test runs (the trainer's engine setup turns TF32 on).
class FullFp32 {
 public:
  FullFp32() : was_(at::globalContext().float32MatmulPrecision()) {
    at::globalContext().setFloat32MatmulPrecision("highest");
  }
  ~FullFp32() {
    at::globalContext().setFloat32MatmulPrecision(
        was_ == at::Float32MatmulPrecision::HIGHEST ? "highest"
        : was_ == at::Float32MatmulPrecision::HIGH  ? "high"
                                                    : "medium");
  }

 private:
  at::Float32MatmulPrecision was_;
};

std::string name(const Shape& s, at::ScalarType t, Path p, bool causal) {
  return std::string(t == at::kBFloat16 ? "bf16" : "fp16") + " B=" + std::to_string(s.B) +
         " nh=" + std::to_string(s.nh) + " nkv=" + std::to_string(s.nkv) +
         " L=" + std::to_string(s.L) + " D=" + std::to_string(s.D) +
         (causal ? " causal" : " non-causal") +
         (p == Path::kFlash    ? " flash"
          : p == Path::kMasked ? " masked kernel"
                               : " math");
}

double max_abs(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kFloat) - b.to(at::kFloat)).abs().max().item<double>();
}

struct Inputs {
  at::Tensor q, k, v, dout;
};
Inputs inputs(const Shape& s, at::ScalarType t, uint64_t seed) {
  at::manual_seed(seed);
  const auto o = at::TensorOptions().device(at::kCUDA);
  return {at::randn({s.B, s.nh, s.L, s.D}, o).to(t), at::randn({s.B, s.nkv, s.L, s.D}, o).to(t),
          at::randn({s.B, s.nkv, s.L, s.D}, o).to(t), at::randn({s.B, s.nh, s.L, s.D}, o).to(t)};
}

// The mask a masked path reads: every key, [1, 1, Lq, Lk]. Flash: none.
at::Tensor mask_for(Path p, int64_t lq, int64_t lk) {
  if (p == Path::kFlash) return at::Tensor();
  return at::ones({1, 1, lq, lk}, at::TensorOptions().device(at::kCUDA).dtype(at::kBool));
}

BlockOut block(Path p, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal) {
  return model::block_attention(q, k, v, mask_for(p, q.size(2), k.size(2)), causal, p);
}

// SDPA in fp32 over the same (rounded) values, K/V repeated for GQA, with its gradients for dout;
// the log-sum-exp of the scaled scores, causal keys only, in fp32.
struct Reference {
  at::Tensor out, lse, dq, dk, dv;
};
Reference reference(const Inputs& in, bool causal) {
  const int64_t rep = in.q.size(1) / in.k.size(1);
  const at::Tensor q = in.q.to(at::kFloat).requires_grad_(true);
  const at::Tensor k = in.k.to(at::kFloat).requires_grad_(true);
  const at::Tensor v = in.v.to(at::kFloat).requires_grad_(true);
  const at::Tensor kr = k.repeat_interleave(rep, 1), vr = v.repeat_interleave(rep, 1);
  const at::Tensor out = at::scaled_dot_product_attention(q, kr, vr, {}, 0.0, causal);
  out.backward(in.dout.to(at::kFloat));
  Reference r{out.detach(), {}, q.grad(), k.grad(), v.grad()};
  const double scale = 1.0 / std::sqrt(static_cast<double>(in.q.size(-1)));
  at::Tensor s = at::matmul(q.detach(), kr.detach().transpose(-2, -1)).mul_(scale);
  if (causal) {
    const at::Tensor later = at::ones({s.size(2), s.size(3)}, s.options().dtype(at::kBool)).triu(1);
    s.masked_fill_(later, -std::numeric_limits<double>::infinity());
  }
  r.lse = at::logsumexp(s, -1);
  return r;
}

// Which path ran: the kernels' output is the element type's values, the math path's fp32 sums.
void expect_path(const BlockOut& b, at::ScalarType t, Path p, const std::string& what) {
  const bool rounded = at::equal(b.out, b.out.to(t).to(at::kFloat));
  EXPECT_EQ(rounded, p != Path::kMath) << what << ": the math path ran, or did not";
}

void check_forward(Path p) {
  FullFp32 fp32;
  for (const Shape& s : kShapes)
    for (at::ScalarType t : kTypes)
      for (bool causal : {true, false}) {
        const std::string what = name(s, t, p, causal);
        const Inputs in = inputs(s, t, 1);
        const Reference ref = reference(in, causal);
        const BlockOut b = block(p, in.q, in.k, in.v, causal);
        ASSERT_EQ(b.out.sizes(), in.q.sizes()) << what;
        ASSERT_EQ(b.out.scalar_type(), at::kFloat) << what;
        ASSERT_EQ(b.lse.sizes(), at::IntArrayRef({s.B, s.nh, s.L})) << what;
        ASSERT_EQ(b.lse.scalar_type(), at::kFloat) << what;
        expect_path(b, t, p, what);
        EXPECT_LT(rel(b.out, ref.out), out_tol(t)) << what << ": out";
        EXPECT_LT(max_abs(b.lse, ref.lse), kLseTol) << what << ": lse";
      }
}

// The ring's layout of halves: non-causal, every query against each half of the keys (blocks of
// L x L/2); causal, the first half of the queries against the first half of the keys (the
// diagonal), the second half against the first (all of it) and the second (the diagonal), merged
// in place into views of running buffers as ring_forward does.
void check_merge(Path p) {
  FullFp32 fp32;
  for (const Shape& s : kShapes)
    for (at::ScalarType t : kTypes)
      for (bool causal : {true, false}) {
        const std::string what = name(s, t, p, causal);
        const Inputs in = inputs(s, t, 2);
        const int64_t h = s.L / 2;
        const auto first = [h](const at::Tensor& x) { return x.narrow(2, 0, h); };
        const auto second = [h](const at::Tensor& x) { return x.narrow(2, h, h); };
        at::Tensor out = at::zeros(in.q.sizes(), in.q.options().dtype(at::kFloat));
        at::Tensor lse =
            at::full({s.B, s.nh, s.L}, -std::numeric_limits<double>::infinity(), out.options());
        if (causal) {
          at::Tensor o1 = first(out), l1 = first(lse), o2 = second(out), l2 = second(lse);
          model::merge_block(o1, l1, block(p, first(in.q), first(in.k), first(in.v), true));
          model::merge_block(o2, l2, block(p, second(in.q), first(in.k), first(in.v), false));
          model::merge_block(o2, l2, block(p, second(in.q), second(in.k), second(in.v), true));
        } else {
          model::merge_block(out, lse, block(p, in.q, first(in.k), first(in.v), false));
          model::merge_block(out, lse, block(p, in.q, second(in.k), second(in.v), false));
        }
        const BlockOut whole = block(p, in.q, in.k, in.v, causal);
        const Reference ref = reference(in, causal);
        EXPECT_LT(rel(out, whole.out), out_tol(t)) << what << ": merged out vs the whole block";
        EXPECT_LT(max_abs(lse, whole.lse), kLseTol) << what << ": merged lse vs the whole block";
        EXPECT_LT(rel(out, ref.out), out_tol(t)) << what << ": merged out vs SDPA";
        EXPECT_LT(max_abs(lse, ref.lse), kLseTol) << what << ": merged lse vs the scores'";
      }
}

// Given the whole row's out (in the element type, as the ring keeps it) and lse: the whole block's
// gradients, and the ring's blocks (the halves of check_merge) summed, against autograd via SDPA.
void check_backward(Path p) {
  FullFp32 fp32;
  for (const Shape& s : kShapes)
    for (at::ScalarType t : kTypes)
      for (bool causal : {true, false}) {
        const std::string what = name(s, t, p, causal);
        const Inputs in = inputs(s, t, 3);
        const Reference ref = reference(in, causal);
        const BlockOut fwd = block(p, in.q, in.k, in.v, causal);
        const at::Tensor out = fwd.out.to(t), lse = fwd.lse;
        const at::Tensor dsum = (in.dout.to(at::kFloat) * out.to(at::kFloat)).sum(-1);
        // The block of queries q0.. (ql) against keys k0.. (kl).
        const auto grads = [&](int64_t q0, int64_t ql, int64_t k0, int64_t kl, bool c) {
          const auto r = [&](const at::Tensor& x) { return x.narrow(2, q0, ql); };
          const auto k = [&](const at::Tensor& x) { return x.narrow(2, k0, kl); };
          return model::block_attention_backward(r(in.dout), r(in.q), k(in.k), k(in.v), r(out),
                                                 r(lse), r(dsum), mask_for(p, ql, kl), c, p);
        };
        // Whole.
        const BlockGrads g = grads(0, s.L, 0, s.L, causal);
        ASSERT_EQ(g.dq.sizes(), in.q.sizes()) << what;
        ASSERT_EQ(g.dk.sizes(), in.k.sizes()) << what;
        ASSERT_EQ(g.dv.sizes(), in.v.sizes()) << what;
        EXPECT_EQ(g.dq.scalar_type(), at::kFloat) << what;
        EXPECT_LT(rel(g.dq, ref.dq), grad_tol(t)) << what << ": dq";
        EXPECT_LT(rel(g.dk, ref.dk), grad_tol(t)) << what << ": dk";
        EXPECT_LT(rel(g.dv, ref.dv), grad_tol(t)) << what << ": dv";
        // As the ring's blocks, accumulated into the row's gradients.
        const int64_t h = s.L / 2;
        at::Tensor dq = at::zeros(in.q.sizes(), in.q.options().dtype(at::kFloat));
        at::Tensor dk = at::zeros(in.k.sizes(), dq.options()), dv = at::zeros_like(dk);
        const auto add = [&](int64_t q0, int64_t ql, int64_t k0, int64_t kl, bool c) {
          const BlockGrads b = grads(q0, ql, k0, kl, c);
          dq.narrow(2, q0, ql).add_(b.dq);
          dk.narrow(2, k0, kl).add_(b.dk);
          dv.narrow(2, k0, kl).add_(b.dv);
        };
        if (causal) {
          add(0, h, 0, h, true);
          add(h, h, 0, h, false);
          add(h, h, h, h, true);
        } else {
          add(0, s.L, 0, h, false);
          add(0, s.L, h, h, false);
        }
        EXPECT_LT(rel(dq, ref.dq), grad_tol(t)) << what << ": dq of the blocks";
        EXPECT_LT(rel(dk, ref.dk), grad_tol(t)) << what << ": dk of the blocks";
        EXPECT_LT(rel(dv, ref.dv), grad_tol(t)) << what << ": dv of the blocks";
      }
}

}  // namespace

TEST(GpuRing, FlashForwardFollowsSdpa) {
  SKIP_WITHOUT_GPU();
  check_forward(Path::kFlash);
}

TEST(GpuRing, MaskedKernelForwardFollowsSdpa) {
  SKIP_WITHOUT_GPU();
  check_forward(Path::kMasked);
}

TEST(GpuRing, MaskedKernelMergedHalvesEqualTheWholeBlock) {
  SKIP_WITHOUT_GPU();
  check_merge(Path::kMasked);
}

TEST(GpuRing, MaskedKernelBackwardFollowsSdpaAutograd) {
  SKIP_WITHOUT_GPU();
  check_backward(Path::kMasked);
}

// A packed row's documents and a sliding window (Mistral's), as block_mask builds them: the
// masked kernel (what a masked block takes by default) and the math path against SDPA in fp32
// with the same boolean mask, a row that sees no key in the block blanked (out 0, lse -inf), and
// the backward given the whole row's out and lse.
TEST(GpuRing, DocumentAndWindowMasksFollowSdpa) {
  SKIP_WITHOUT_GPU();
  FullFp32 fp32;
  const Shape s{2, 8, 2, 512, 128};
  const auto dev = at::TensorOptions().device(at::kCUDA);
  const at::Tensor pos = at::arange(s.L, dev.dtype(at::kLong));
  const at::Tensor doc = at::floor_divide(pos, 100).unsqueeze(0).repeat({s.B, 1});  // [B, L]
  for (at::ScalarType t : kTypes)
    for (int64_t window : {int64_t{0}, int64_t{64}}) {
      const Inputs in = inputs(s, t, 5);
      const at::Tensor back = pos.unsqueeze(1) - pos.unsqueeze(0);
      at::Tensor m = back.ge(0);
      if (window > 0) m = m.logical_and(back.lt(window));
      m = m.unsqueeze(0).logical_and(doc.unsqueeze(2).eq(doc.unsqueeze(1))).unsqueeze(1);
      const int64_t rep = s.nh / s.nkv;
      const at::Tensor q = in.q.to(at::kFloat).requires_grad_(true);
      const at::Tensor k = in.k.to(at::kFloat).requires_grad_(true);
      const at::Tensor v = in.v.to(at::kFloat).requires_grad_(true);
      const at::Tensor ref = at::scaled_dot_product_attention(q, k.repeat_interleave(rep, 1),
                                                              v.repeat_interleave(rep, 1), m);
      ref.backward(in.dout.to(at::kFloat));
      for (Path p : {Path::kAuto, Path::kMath}) {
        const std::string what = std::string(t == at::kBFloat16 ? "bf16" : "fp16") + " window " +
                                 std::to_string(window) + (p == Path::kAuto ? " kernel" : " math");
        const BlockOut b = model::block_attention(in.q, in.k, in.v, m, /*causal=*/false, p);
        expect_path(b, t, p == Path::kAuto ? Path::kMasked : Path::kMath, what);
        EXPECT_LT(rel(b.out, ref.detach()), out_tol(t)) << what << ": out";
        const at::Tensor out = b.out.to(t);
        const at::Tensor dsum = (in.dout.to(at::kFloat) * out.to(at::kFloat)).sum(-1);
        const BlockGrads g = model::block_attention_backward(in.dout, in.q, in.k, in.v, out, b.lse,
                                                             dsum, m, false, p);
        EXPECT_LT(rel(g.dq, q.grad()), grad_tol(t)) << what << ": dq";
        EXPECT_LT(rel(g.dk, k.grad()), grad_tol(t)) << what << ": dk";
        EXPECT_LT(rel(g.dv, v.grad()), grad_tol(t)) << what << ": dv";
      }
      // A block whose first rows see none of its keys (a later document's keys only).
      const at::Tensor later = m.narrow(3, 200, 100);  // keys of document 2
      const BlockOut b = model::block_attention(in.q, in.k.narrow(2, 200, 100),
                                                in.v.narrow(2, 200, 100), later, false);
      EXPECT_TRUE(b.lse.narrow(2, 0, 200).isneginf().all().item<bool>()) << "no key: lse -inf";
      EXPECT_TRUE(b.out.narrow(2, 0, 200).eq(0).all().item<bool>()) << "no key: out 0";
      EXPECT_TRUE(b.lse.narrow(2, 200, 100).isfinite().all().item<bool>());
    }
}

TEST(GpuRing, MathForwardFollowsSdpa) {
  SKIP_WITHOUT_GPU();
  check_forward(Path::kMath);
}

TEST(GpuRing, FlashMergedHalvesEqualTheWholeBlock) {
  SKIP_WITHOUT_GPU();
  check_merge(Path::kFlash);
}

TEST(GpuRing, MathMergedHalvesEqualTheWholeBlock) {
  SKIP_WITHOUT_GPU();
  check_merge(Path::kMath);
}

TEST(GpuRing, FlashBackwardFollowsSdpaAutograd) {
  SKIP_WITHOUT_GPU();
  check_backward(Path::kFlash);
}

TEST(GpuRing, MathBackwardFollowsSdpaAutograd) {
  SKIP_WITHOUT_GPU();
  check_backward(Path::kMath);
}

// The blocks a 7B layer's ring computes at 8192 tokens over 2 ranks (32 heads, 8 K/V heads, bf16):
// the diagonal (4096 x 4096, causal) and an off-diagonal one (4096 x 2048). Prints flash's forward
// and backward time without a mask, and for a packed row (documents of 1,000 tokens) and a sliding
// window (1,024) the masked kernel's and the math path's, each as a multiple of unmasked flash.
TEST(GpuRing, TimesFlashAndMathPaths) {
  SKIP_WITHOUT_GPU();
  FullFp32 fp32;
  const auto o = at::TensorOptions().device(at::kCUDA).dtype(at::kBFloat16);
  at::manual_seed(4);
  const int64_t B = 1, nh = 32, nkv = 8, L = 4096, D = 128, window = 1024;
  const at::Tensor q = at::randn({B, nh, L, D}, o), dout = at::randn({B, nh, L, D}, o);
  const at::Tensor k = at::randn({B, nkv, L, D}, o), v = at::randn({B, nkv, L, D}, o);
  const at::Tensor pos = at::arange(L, o.dtype(at::kLong));
  for (bool causal : {true, false}) {
    const int64_t lk = causal ? L : L / 2;
    const at::Tensor kb = k.narrow(2, 0, lk), vb = v.narrow(2, 0, lk);
    // Off the diagonal the keys are the previous chunk's: positions L - lk .. L - 1 back.
    const at::Tensor kpos = causal ? pos.narrow(0, 0, lk) : pos.narrow(0, 0, lk) - lk;
    const at::Tensor back = pos.unsqueeze(1) - kpos.unsqueeze(0);
    const at::Tensor qdoc = at::floor_divide(pos + L, 1000),
                     kdoc = at::floor_divide(kpos + L, 1000);
    const at::Tensor packed = qdoc.unsqueeze(1).eq(kdoc.unsqueeze(0)).unsqueeze(0).unsqueeze(0);
    const at::Tensor sliding = back.lt(window).unsqueeze(0).unsqueeze(0);
    // ms forward, backward of one path on one mask; the output for the agreement check.
    const auto timed = [&](const at::Tensor& mask, Path p, at::Tensor* out_f) {
      const BlockOut b = model::block_attention(q, kb, vb, mask, causal, p);
      if (out_f) *out_f = b.out;
      const at::Tensor out = b.out.to(at::kBFloat16);
      const at::Tensor dsum = (dout.to(at::kFloat) * out.to(at::kFloat)).sum(-1);
      const double f = time_ms([&] { model::block_attention(q, kb, vb, mask, causal, p); });
      const double g = time_ms([&] {
        model::block_attention_backward(dout, q, kb, vb, out, b.lse, dsum, mask, causal, p);
      });
      return std::pair<double, double>{f, g};
    };
    const auto flash = timed({}, Path::kFlash, nullptr);
    for (const auto& [what, mask] : {std::pair{"packed", packed}, std::pair{"sliding", sliding}}) {
      at::Tensor kernel_out, math_out;
      const auto kern = timed(mask, Path::kMasked, &kernel_out);
      const auto math = timed(mask, Path::kMath, &math_out);
      EXPECT_LT(rel(kernel_out, math_out), out_tol(at::kBFloat16)) << what << ": paths differ";
      char line[400];
      std::snprintf(line, sizeof line,
                    "ring timing: bf16 B=%lld nh=%lld nkv=%lld Lq=%lld Lk=%lld D=%lld %s, %s: "
                    "flash unmasked forward %.3f ms, backward %.3f ms; masked kernel forward "
                    "%.3f ms (x%.2f of flash), backward %.3f ms (x%.2f); math forward %.3f ms "
                    "(x%.1f), backward %.3f ms (x%.1f)",
                    static_cast<long long>(B), static_cast<long long>(nh),
                    static_cast<long long>(nkv), static_cast<long long>(L),
                    static_cast<long long>(lk), static_cast<long long>(D),
                    causal ? "causal" : "non-causal", what, flash.first, flash.second, kern.first,
                    kern.first / flash.first, kern.second, kern.second / flash.second, math.first,
                    math.first / flash.first, math.second, math.second / flash.second);
      std::printf("%s\n", line);
      RecordProperty(std::string("timing_") + (causal ? "causal_" : "non_causal_") + what, line);
    }
  }
}
