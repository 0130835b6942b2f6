// Ring attention's blocks on the GPU (model/ring_attention.h), in bf16 and fp16 with grouped-query
// heads: block_attention through flash's kernel (no mask) and through the math path (a mask of all
// true), each against at::scaled_dot_product_attention in fp32 over the same values (K/V repeated
// for GQA) and its log-sum-exp against one of the scaled scores computed here; two halves' blocks
// merged by merge_block, as the ring lays them out, against the whole block;
// block_attention_backward given the whole row's out and lse against autograd through SDPA, whole
// and as the ring's blocks. GpuRing.TimesFlashAndMathPaths prints each path's time
// (bench/gpu_suite.sh --parts ring reads the "ring timing:" lines). Skipped, with the reason
// printed, without a GPU.
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
#include "shardtrain/model/ring_attention.h"
#ifdef SHARDTRAIN_TORCH_CUDA
#include "shardtrain/cuda/cuda_handles.h"
#endif

using namespace shardtrain;
using model::BlockGrads;
using model::BlockOut;

namespace {

enum class Path { kFlash, kMath };

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
         (causal ? " causal" : " non-causal") + (p == Path::kFlash ? " flash" : " math");
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

// The mask that sends a block down the math path: every key, [1, 1, Lq, Lk]. Flash: none.
at::Tensor mask_for(Path p, int64_t lq, int64_t lk) {
  if (p == Path::kFlash) return at::Tensor();
  return at::ones({1, 1, lq, lk}, at::TensorOptions().device(at::kCUDA).dtype(at::kBool));
}

BlockOut block(Path p, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal) {
  return model::block_attention(q, k, v, mask_for(p, q.size(2), k.size(2)), causal);
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

// Which path ran: flash's output is the element type's values, the math path's fp32 sums.
void expect_path(const BlockOut& b, at::ScalarType t, Path p, const std::string& what) {
  const bool rounded = at::equal(b.out, b.out.to(t).to(at::kFloat));
  EXPECT_EQ(rounded, p == Path::kFlash) << what << ": the other path ran";
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
                                                 r(lse), r(dsum), mask_for(p, ql, kl), c);
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

void sync() {
#ifdef SHARDTRAIN_TORCH_CUDA
  cuda::device_synchronize();
#endif
}

// Milliseconds per call of fn, the median of 10 after 3 warm-up calls.
template <class F>
double time_ms(F fn) {
  for (int i = 0; i < 3; ++i) fn();
  std::vector<double> ms;
  for (int i = 0; i < 10; ++i) {
    sync();
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    sync();
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return (ms[4] + ms[5]) / 2;
}

}  // namespace

TEST(GpuRing, FlashForwardFollowsSdpa) {
  SKIP_WITHOUT_GPU();
  check_forward(Path::kFlash);
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
// the diagonal (4096 x 4096, causal) and an off-diagonal one (4096 x 2048). Prints each path's
// forward and backward time; the two paths' outputs must agree.
TEST(GpuRing, TimesFlashAndMathPaths) {
  SKIP_WITHOUT_GPU();
  FullFp32 fp32;
  const auto o = at::TensorOptions().device(at::kCUDA).dtype(at::kBFloat16);
  at::manual_seed(4);
  const int64_t B = 1, nh = 32, nkv = 8, L = 4096, D = 128;
  const at::Tensor q = at::randn({B, nh, L, D}, o), dout = at::randn({B, nh, L, D}, o);
  const at::Tensor k = at::randn({B, nkv, L, D}, o), v = at::randn({B, nkv, L, D}, o);
  for (bool causal : {true, false}) {
    const int64_t lk = causal ? L : L / 2;
    const at::Tensor kb = k.narrow(2, 0, lk), vb = v.narrow(2, 0, lk);
    double fwd[2], bwd[2];
    at::Tensor outs[2];
    for (Path p : {Path::kFlash, Path::kMath}) {
      const int i = p == Path::kFlash ? 0 : 1;
      const at::Tensor mask = mask_for(p, L, lk);
      const BlockOut b = model::block_attention(q, kb, vb, mask, causal);
      outs[i] = b.out;
      const at::Tensor out = b.out.to(at::kBFloat16);
      const at::Tensor dsum = (dout.to(at::kFloat) * out.to(at::kFloat)).sum(-1);
      fwd[i] = time_ms([&] { model::block_attention(q, kb, vb, mask, causal); });
      bwd[i] = time_ms([&] {
        model::block_attention_backward(dout, q, kb, vb, out, b.lse, dsum, mask, causal);
      });
    }
    EXPECT_LT(rel(outs[0], outs[1]), out_tol(at::kBFloat16)) << "flash and math paths differ";
    char line[320];
    std::snprintf(line, sizeof line,
                  "ring timing: bf16 B=%lld nh=%lld nkv=%lld Lq=%lld Lk=%lld D=%lld %s: flash "
                  "forward %.3f ms, backward %.3f ms; math forward %.3f ms, backward %.3f ms; "
                  "flash faster x%.1f forward, x%.1f backward",
                  static_cast<long long>(B), static_cast<long long>(nh),
                  static_cast<long long>(nkv), static_cast<long long>(L),
                  static_cast<long long>(lk), static_cast<long long>(D),
                  causal ? "causal" : "non-causal", fwd[0], bwd[0], fwd[1], bwd[1], fwd[1] / fwd[0],
                  bwd[1] / bwd[0]);
    std::printf("%s\n", line);
    RecordProperty(causal ? "timing_causal" : "timing_non_causal", line);
  }
}
