// Float8 (model/fp8.h, cuda/kernels/fp8_math.h) on the CPU: the element functions the cast kernels
// run against PyTorch's own float8 dtypes (torch.float8_e4m3fn, torch.float8_e5m2), bit for bit;
// the composite quantisation against those element functions; and the emulated float8 linear's
// output and gradients against a reference built here from PyTorch's casts.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "model/family_logits.h"
#include "shardtrain/cuda/kernels/fp8_math.h"
#include "shardtrain/fsdp/flat_layout.h"
#include "shardtrain/model/config.h"
#include "shardtrain/model/fp8.h"
#include "shardtrain/model/params.h"
#include "shardtrain/model/run_plan.h"
#include "shardtrain/runtime/error.h"

using namespace shardtrain;
namespace kn = shardtrain::cuda::kernels;
using kn::Fp8Format;
using model::Fp8Impl;
using model::Fp8Mode;

namespace {

at::ScalarType dtype_of(Fp8Format f) {
  return f == Fp8Format::kE4M3 ? at::kFloat8_e4m3fn : at::kFloat8_e5m2;
}

const char* name_of(Fp8Format f) { return f == Fp8Format::kE4M3 ? "e4m3fn" : "e5m2"; }

// Every value of the format, the ties halfway between neighbours and the floats just beside those
// ties, both signs, zeros, values past the range, infinities and NaN, plus log-uniform draws over
// the subnormals to far past the largest.
std::vector<float> probes(Fp8Format f) {
  std::vector<float> finite;
  for (int c = 0; c < 128; ++c) {
    const float v = kn::fp8_decode(static_cast<uint8_t>(c), f);
    if (std::isfinite(v)) finite.push_back(v);
  }
  std::vector<float> v = finite;
  for (size_t i = 0; i + 1 < finite.size(); ++i) {
    const float mid = (finite[i] + finite[i + 1]) / 2;  // exact: fp8 values have 3 bits
    v.push_back(mid);
    v.push_back(std::nextafter(mid, 0.0f));
    v.push_back(std::nextafter(mid, 1e30f));
  }
  const float top = kn::fp8_max(f);
  for (float x : {top * 1.03f, top * 1.0625f, top * 1.07f, top * 1.1f, top * 2, top * 1e3f})
    v.push_back(x);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> e(-30, 20);
  for (int i = 0; i < 20000; ++i) v.push_back(std::exp2(e(rng)));
  const size_t n = v.size();
  for (size_t i = 0; i < n; ++i) v.push_back(-v[i]);
  v.push_back(std::numeric_limits<float>::infinity());
  v.push_back(-std::numeric_limits<float>::infinity());
  v.push_back(std::numeric_limits<float>::quiet_NaN());
  return v;
}

// Reference casts: PyTorch's float8 dtypes.
at::Tensor torch_cast_bits(const std::vector<float>& v, Fp8Format f) {
  return at::tensor(v).to(dtype_of(f)).view(at::kByte);
}

}  // namespace

TEST(Fp8Math, EncodeIsPyTorchsFloat8CastBitForBit) {
  for (Fp8Format f : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
    const std::vector<float> v = probes(f);
    const at::Tensor want = torch_cast_bits(v, f);
    const uint8_t* w = want.const_data_ptr<uint8_t>();
    int bad = 0;
    for (size_t i = 0; i < v.size(); ++i) {
      const uint8_t mine = kn::fp8_encode(v[i], f);
      if (mine != w[i] && ++bad <= 5)
        ADD_FAILURE() << name_of(f) << " " << v[i] << ": 0x" << std::hex << int(mine)
                      << ", torch 0x" << int(w[i]);
    }
    EXPECT_EQ(bad, 0) << name_of(f) << " over " << v.size() << " values";
  }
}

TEST(Fp8Math, DecodeIsPyTorchsFloat8ValueForEveryCode) {
  for (Fp8Format f : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
    const at::Tensor codes = at::arange(256, at::kInt).to(at::kByte);
    const at::Tensor want = codes.view(dtype_of(f)).to(at::kFloat);
    for (int c = 0; c < 256; ++c) {
      const float mine = kn::fp8_decode(static_cast<uint8_t>(c), f);
      const float ref = want[c].item<float>();
      if (std::isnan(ref)) {
        EXPECT_TRUE(std::isnan(mine)) << name_of(f) << " code " << c;
      } else {
        EXPECT_EQ(mine, ref) << name_of(f) << " code " << c;
      }
    }
  }
}

TEST(Fp8Math, ScaleMapsTheAmaxToTheLargestValueAndSaturates) {
  EXPECT_EQ(kn::fp8_scale(2.0f, Fp8Format::kE4M3), 224.0f);
  EXPECT_EQ(kn::fp8_decode(kn::fp8_quantize(-2.0f, 224.0f, Fp8Format::kE4M3), Fp8Format::kE4M3),
            -448.0f);
  EXPECT_EQ(kn::fp8_quantize(1e6f, 1.0f, Fp8Format::kE4M3), 0x7e) << "saturates to 448, not NaN";
  EXPECT_EQ(kn::fp8_quantize(1e6f, 1.0f, Fp8Format::kE5M2), 0x7b) << "saturates to 57344, not inf";
  EXPECT_EQ(kn::fp8_scale(0.0f, Fp8Format::kE4M3), 448.0f / kn::kFp8AmaxFloor);
  EXPECT_TRUE(std::isnan(kn::fp8_scale(std::nanf(""), Fp8Format::kE5M2))) << "NaN is not hidden";
}

// The column-wise cast's amax pass fills an H100 (132 SMs) several times over for a 7B
// projection's input at 2,048 to 8,192 tokens: rows are split across the grid, not walked by one
// block per 32 columns (128 blocks for 4,096 columns, whatever the tokens).
TEST(Fp8Math, ColumnwiseAmaxSplitsRowsAcrossTheGrid) {
  constexpr int64_t kSms = 132;
  for (const int64_t tokens : {2048, 8192})
    EXPECT_GE(kn::colwise_amax_blocks(tokens, 4096), 4 * kSms) << tokens << " tokens";
  EXPECT_EQ(kn::colwise_amax_blocks(8192, 4096), 128 * (8192 / kn::kColwiseSlabRows));
  EXPECT_EQ(kn::colwise_amax_blocks(1, 33), 2) << "a partial tile and a partial slab each count";
}

namespace {

// The element functions over x [rows, cols] (fp32 values): what the kernels compute.
model::Fp8Operand host_quantize(const at::Tensor& x_in, Fp8Format f, bool rowwise, bool transpose) {
  const at::Tensor x = (transpose ? x_in.t() : x_in).to(at::kFloat).contiguous();
  const int64_t R = x.size(0), C = x.size(1);
  const float* p = x.const_data_ptr<float>();
  std::vector<float> amax(rowwise ? R : 1, 0.0f);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) {
      float& m = amax[rowwise ? r : 0];
      m = std::max(m, std::fabs(p[r * C + c]));
    }
  model::Fp8Operand out;
  out.q = at::empty({R, C}, at::kByte);
  out.inv = rowwise ? at::empty({R}, at::kFloat) : at::empty({}, at::kFloat);
  uint8_t* q = out.q.mutable_data_ptr<uint8_t>();
  float* inv = out.inv.mutable_data_ptr<float>();
  for (int64_t r = 0; r < R; ++r) {
    const float s = kn::fp8_scale(amax[rowwise ? r : 0], f);
    inv[rowwise ? r : 0] = 1.0f / s;
    for (int64_t c = 0; c < C; ++c) q[r * C + c] = kn::fp8_quantize(p[r * C + c], s, f);
  }
  return out;
}

at::Tensor spread(std::initializer_list<int64_t> shape, at::ScalarType t, uint64_t seed) {
  at::manual_seed(seed);
  // Magnitudes over several decades, so that rows differ in amax and subnormals occur.
  return (at::randn(shape) * at::exp(at::randn(shape) * 2)).to(t);
}

}  // namespace

TEST(Fp8Quantize, CompositeWritesWhatTheElementFunctionsWrite) {
  for (at::ScalarType t : {at::kFloat, at::kBFloat16})
    for (Fp8Format f : {Fp8Format::kE4M3, Fp8Format::kE5M2})
      for (bool rowwise : {false, true})
        for (bool transpose : {false, true}) {
          const at::Tensor x = spread({37, 48}, t, 11);
          const auto mine = model::fp8_quantize(x, f, rowwise, transpose, Fp8Impl::kEmulated);
          const auto want = host_quantize(x, f, rowwise, transpose);
          const std::string what = std::string(name_of(f)) +
                                   (rowwise ? " rowwise" : " tensorwise") +
                                   (transpose ? " transposed" : "") + " " + c10::toString(t);
          EXPECT_EQ(mine.q.scalar_type(), dtype_of(f)) << what;
          EXPECT_TRUE(at::equal(mine.q.view(at::kByte), want.q)) << what;
          EXPECT_TRUE(at::equal(mine.inv, want.inv)) << what;
          // The amax element lands on the format's largest value in each scaled group.
          const at::Tensor deq = mine.q.to(at::kFloat).abs();
          const at::Tensor top = rowwise ? deq.amax({1}) : deq.amax();
          EXPECT_TRUE(at::all(top == kn::fp8_max(f)).item<bool>()) << what;
        }
}

TEST(Fp8Quantize, AZeroTensorStaysZeroAndNaNIsNotHidden) {
  const auto z = model::fp8_quantize(at::zeros({4, 16}), Fp8Format::kE4M3, false, false);
  EXPECT_TRUE(at::all(z.q.to(at::kFloat) == 0).item<bool>());
  at::Tensor x = at::randn({4, 16});
  x[2][3] = std::nanf("");
  const auto n = model::fp8_quantize(x, Fp8Format::kE4M3, false, false);
  EXPECT_TRUE(at::all(at::isnan(n.q.to(at::kFloat))).item<bool>()) << "one NaN spoils the scale";
}

namespace {

// PyTorch's casts, written out: saturate(x * s) in float8 and back, / s; scales along dim 1 of
// the operand as it is multiplied (rowwise) or one for the tensor.
at::Tensor fake_quant(const at::Tensor& x, Fp8Format f, bool rowwise) {
  const at::Tensor xf = x.to(at::kFloat);
  const at::Tensor amax = rowwise ? xf.abs().amax({1}, true) : xf.abs().amax();
  const at::Tensor s = kn::fp8_max(f) / amax.clamp_min(kn::kFp8AmaxFloor);
  const double m = kn::fp8_max(f);
  return (xf * s).clamp(-m, m).to(dtype_of(f)).to(at::kFloat) / s;
}

struct LinearOut {
  at::Tensor y, dx, dw;
};

LinearOut run_fp8(const at::Tensor& x0, const at::Tensor& w0, const at::Tensor& dy, Fp8Mode m,
                  bool x_grad = true, bool w_grad = true) {
  const at::Tensor x = x0.clone().requires_grad_(x_grad);
  const at::Tensor w = w0.clone().requires_grad_(w_grad);
  const at::Tensor y = model::fp8_linear(x, w, m);
  y.backward(dy);
  return {y.detach(), x.grad(), w.grad()};
}

double rel(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).norm().item<double>() / b.norm().item<double>();
}

}  // namespace

TEST(Fp8Linear, OutputAndGradientsAreTheFloat8ProductsOfPyTorchsCasts) {
  const at::Tensor x = spread({2, 24, 64}, at::kFloat, 1);  // [B, T, in]
  const at::Tensor w = spread({48, 64}, at::kFloat, 2) * 0.1;
  const at::Tensor dy = spread({2, 24, 48}, at::kFloat, 3) * 1e-3;
  for (Fp8Mode m : {Fp8Mode::kTensorwise, Fp8Mode::kRowwise}) {
    const bool rw = m == Fp8Mode::kRowwise;
    const LinearOut got = run_fp8(x, w, dy, m);
    const at::Tensor x2 = x.reshape({48, 64});
    const at::Tensor g2 = dy.reshape({48, 48});
    // y = x w^T: x scaled per token, w per output row.
    const at::Tensor y =
        at::mm(fake_quant(x2, Fp8Format::kE4M3, rw), fake_quant(w, Fp8Format::kE4M3, rw).t());
    // dx = dy w: dy per token (e5m2), w per input column.
    const at::Tensor dx =
        at::mm(fake_quant(g2, Fp8Format::kE5M2, rw), fake_quant(w.t(), Fp8Format::kE4M3, rw).t());
    // dw = dy^T x: both scaled along the tokens, per output row and per input column.
    const at::Tensor dw = at::mm(fake_quant(g2.t(), Fp8Format::kE5M2, rw),
                                 fake_quant(x2.t(), Fp8Format::kE4M3, rw).t());
    const char* what = model::fp8_mode_name(m);
    EXPECT_LT(rel(got.y.reshape({48, 48}), y), 1e-6) << what;
    EXPECT_LT(rel(got.dx.reshape({48, 64}), dx), 1e-6) << what;
    EXPECT_LT(rel(got.dw, dw), 1e-6) << what;
    // Not the fp32 linear, though near it: float8 rounding, a few percent at most.
    const at::Tensor exact = at::linear(x, w);
    EXPECT_GT(rel(got.y, exact), 1e-3) << what;
    EXPECT_LT(rel(got.y, exact), 0.08) << what;
    EXPECT_GT(rel(got.dw, at::mm(g2.t(), x2)), 1e-3) << what;
    EXPECT_LT(rel(got.dw, at::mm(g2.t(), x2)), 0.15) << what;
  }
}

TEST(Fp8Linear, AFrozenWeightOrALeafInputLeavesTheOtherGradientAsItWas) {
  const at::Tensor x = spread({32, 32}, at::kFloat, 4);
  const at::Tensor w = spread({16, 32}, at::kFloat, 5);
  const at::Tensor dy = spread({32, 16}, at::kFloat, 6);
  const LinearOut both = run_fp8(x, w, dy, Fp8Mode::kTensorwise);
  const LinearOut frozen = run_fp8(x, w, dy, Fp8Mode::kTensorwise, true, false);
  EXPECT_FALSE(frozen.dw.defined());
  // With w frozen only dy as it is is cast, not its transpose too: dx comes out the same.
  EXPECT_TRUE(at::equal(frozen.dx, both.dx));
  const LinearOut leaf = run_fp8(x, w, dy, Fp8Mode::kRowwise, false, true);
  EXPECT_FALSE(leaf.dx.defined());
  EXPECT_TRUE(at::equal(leaf.dw, run_fp8(x, w, dy, Fp8Mode::kRowwise).dw));
}

TEST(Fp8Linear, RowwiseScalesKeepAnOutlierRowFromFlatteningTheOthers) {
  at::Tensor x = spread({64, 64}, at::kFloat, 8);
  x[5] *= 1e4;  // one token far larger than the rest: tensorwise scaling flushes the others
  const at::Tensor w = spread({32, 64}, at::kFloat, 9);
  const at::Tensor exact = at::linear(x, w);
  const auto rest = [](const at::Tensor& t) {
    return at::cat({t.narrow(0, 0, 5), t.narrow(0, 6, 58)});
  };
  const double tw = rel(rest(model::fp8_linear(x, w, Fp8Mode::kTensorwise)), rest(exact));
  const double rw = rel(rest(model::fp8_linear(x, w, Fp8Mode::kRowwise)), rest(exact));
  EXPECT_LT(rw, 0.08);
  EXPECT_GT(tw, 4 * rw) << "tensorwise " << tw << ", rowwise " << rw;
}

TEST(Fp8Options, ModesShapesAndDevicesAreCheckedByName) {
  EXPECT_EQ(model::parse_fp8_mode("rowwise"), Fp8Mode::kRowwise);
  try {
    model::parse_fp8_mode("e4m3");
    ADD_FAILURE() << "accepted";
  } catch (const runtime::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--fp8 must be off, tensorwise or rowwise"),
              std::string::npos)
        << e.what();
  }
  model::ModelConfig cfg = model::model_preset("tiny");
  EXPECT_EQ(model::fp8_shape_problem(cfg), "");
  cfg.intermediate_size = 172;
  EXPECT_NE(model::fp8_shape_problem(cfg).find("gate_proj is [172, "), std::string::npos)
      << model::fp8_shape_problem(cfg);
  EXPECT_NE(model::fp8_device_problem(at::Device(at::kCPU)), "");
}

// The float8 all-gather's codec (model/gather_codec.h), four ranks played in one process: every
// rank's shard encoded with the scales of the whole weights, the bytes laid end to end as the
// all-gather lays them, decoded: each projection weight is PyTorch's float8 cast of the whole
// bf16 weight (one scale per weight) scaled back, the norms exactly their bf16 values, and a
// layer's bytes on the wire about half of bf16's.
TEST(Fp8GatherCodec, DecodesEachWeightAsItsWholeTensorsFloat8Cast) {
  model::ModelConfig m = model::model_preset("tiny");
  const int ranks = 4;
  const auto specs = model::llama_param_specs(m);
  const fsdp::FlatLayout layout = fsdp::flat_layout(specs, 1, ranks);
  std::vector<model::FlatPiece> pieces;
  for (const fsdp::FlatEntry& e : layout.entries) pieces.push_back({e.name, e.offset, e.numel});
  at::manual_seed(11);
  const at::Tensor flat = (at::randn({layout.padded}) * at::exp(at::randn({layout.padded})))
                              .narrow(0, 0, layout.padded)
                              .contiguous();
  flat.narrow(0, layout.numel, layout.padded - layout.numel).zero_();
  model::RunPlan run;
  run.fp8 = Fp8Mode::kTensorwise;
  std::vector<std::unique_ptr<model::GatherCodec>> codecs;
  std::vector<at::Tensor> stats, sends;
  for (int r = 0; r < ranks; ++r) {
    codecs.push_back(run.gather_codec(m, {model::UnitKind::kDecoderLayer, 0}, pieces, layout.padded,
                                      ranks, r, at::kBFloat16));
    ASSERT_NE(codecs.back(), nullptr);
    stats.push_back(
        codecs[r]->statistics(flat.narrow(0, r * layout.shard_numel, layout.shard_numel)));
  }
  const at::Tensor all = at::cat(stats);
  for (int r = 0; r < ranks; ++r) {
    sends.push_back(at::empty({codecs[r]->send_bytes()}, at::kByte));
    codecs[r]->encode(flat.narrow(0, r * layout.shard_numel, layout.shard_numel), all, sends[r]);
  }
  const at::Tensor full = at::empty({layout.padded}, at::kBFloat16);
  codecs[0]->decode(at::cat(sends), full);
  int weights = 0;
  for (const fsdp::FlatEntry& e : layout.entries) {
    const at::Tensor want = flat.narrow(0, e.offset, e.numel).to(at::kBFloat16);
    const at::Tensor got = full.narrow(0, e.offset, e.numel);
    if (e.name.find("proj.weight") == std::string::npos) {
      EXPECT_TRUE(got.equal(want)) << e.name << " travels in bf16";
      continue;
    }
    ++weights;
    const at::Tensor amax = want.to(at::kFloat).abs().amax();
    const at::Tensor scale = 448.0 / amax.clamp_min(kn::kFp8AmaxFloor);
    const at::Tensor codes = (want.to(at::kFloat) * scale).clamp(-448, 448).to(at::kFloat8_e4m3fn);
    EXPECT_TRUE(got.equal((codes.to(at::kFloat) * scale.reciprocal()).to(at::kBFloat16))) << e.name;
  }
  EXPECT_EQ(weights, 7);
  EXPECT_TRUE(full.narrow(0, layout.numel, layout.padded - layout.numel).eq(0).all().item<bool>());
  EXPECT_LT(codecs[0]->send_bytes(), layout.shard_numel * 2 * 0.6);
  // No codec where nothing is sharded, nor for rowwise or the layers' neighbours.
  EXPECT_EQ(run.gather_codec(m, {model::UnitKind::kDecoderLayer, 0}, pieces, layout.padded, 1, 0,
                             at::kBFloat16),
            nullptr);
  EXPECT_EQ(run.gather_codec(m, {model::UnitKind::kHead, -1}, pieces, layout.padded, ranks, 0,
                             at::kBFloat16),
            nullptr);
  // Fused layers with an adapter on q: the adapters-off pass (DPO's reference) merges q k v under
  // one scale, the training pass scales q apart; no one float8 form serves both.
  run.fused_layers = true;
  run.adapters.rank = 4;
  run.adapters.targets = {"o_proj"};
  EXPECT_NE(run.gather_codec(m, {model::UnitKind::kDecoderLayer, 0}, pieces, layout.padded, ranks,
                             0, at::kBFloat16),
            nullptr)
      << "o_proj is no merged projection's member";
  run.adapters.targets = {"q_proj"};
  EXPECT_EQ(run.gather_codec(m, {model::UnitKind::kDecoderLayer, 0}, pieces, layout.padded, ranks,
                             0, at::kBFloat16),
            nullptr);
  run.fp8 = Fp8Mode::kRowwise;
  EXPECT_EQ(run.gather_codec(m, {model::UnitKind::kDecoderLayer, 0}, pieces, layout.padded, ranks,
                             0, at::kBFloat16),
            nullptr);
}

// Every family's forward with its projections in float8 (the CPU's emulation: the casts and
// scales the GPU kernels use): near fp32 within e4m3's rounding, and not fp32 itself, tensorwise
// and rowwise, on the composite and the merged (fused) projections.
TEST(Fp8Families, EachFamilysForwardInFloat8StaysNearFp32) {
  for (const auto& [name, m] : test::family_cases()) {
    const at::Tensor ref = test::family_logits(m, at::kCPU, at::kFloat, false);
    for (const auto mode : {model::Fp8Mode::kTensorwise, model::Fp8Mode::kRowwise})
      for (const bool fused : {false, true}) {
        const at::Tensor f8 = test::family_logits(m, at::kCPU, at::kFloat, fused, mode);
        const double rel = ((f8 - ref).norm() / ref.norm()).item<double>();
        const std::string where =
            name + " " + model::fp8_mode_name(mode) + " fused " + std::to_string(fused);
        std::printf("%s: relative L2 %.2e from fp32\n", where.c_str(), rel);
        EXPECT_LE(rel, 0.2) << where;  // e4m3: 3 mantissa bits, 3 layers deep (OLMo 2: 0.14)
        EXPECT_GE(rel, 1e-3) << where << ": the projections ran in float8";
      }
  }
}
