// --fp8 on the GPU: shardtrain's cast kernels against the composite casts (the bits the CPU tests
// tie to PyTorch's float8 dtypes), at::_scaled_mm against the emulated float8 GEMM, the float8
// linear's output and gradients against its emulation, and training through the CLI against bf16,
// with a checkpoint resumed with and without --fp8. Skipped, with the reason printed, without a
// GPU.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "gpu_skip.h"
#include "gpu_support.h"
#include "run_binary.h"
#include "shardtrain/fsdp/flat_layout.h"
#include "shardtrain/model/fp8.h"
#include "shardtrain/model/run_plan.h"

using namespace testing_support;
using namespace shardtrain;
using model::Fp8Format;
using model::Fp8Impl;
using model::Fp8Mode;

namespace {

// Float8 tensor cores (compute capability 8.9+) as well as a GPU.
#define SKIP_WITHOUT_FP8_GPU()                                                                   \
  SKIP_WITHOUT_GPU();                                                                            \
  if (const std::string why = model::fp8_device_problem(at::Device(at::kCUDA, 0)); !why.empty()) \
  GTEST_SKIP() << "GPU test skipped: " << why

at::Tensor spread(at::IntArrayRef shape, at::ScalarType t, uint64_t seed) {
  at::manual_seed(seed);
  const auto o = at::TensorOptions().device(at::kCUDA);
  return (at::randn(shape, o) * at::exp(at::randn(shape, o) * 2)).to(t);
}

}  // namespace

TEST(GpuFp8, CastKernelsWriteTheCompositeBits) {
  SKIP_WITHOUT_GPU();
  // Without the kernels both sides would be the composite casts: nothing compared.
  ASSERT_TRUE(model::fp8_kernels_built()) << "a CUDA build without shardtrain's cast kernels";
  // Shapes off the 32 x 32 tile and one of a 7B projection's input at 4 rows of 2048 tokens.
  const std::vector<std::vector<int64_t>> shapes = {{100, 72}, {33, 1}, {1, 4096}, {8192, 4096}};
  for (const auto& s : shapes)
    for (at::ScalarType t : {at::kBFloat16, at::kFloat})
      for (Fp8Format f : {Fp8Format::kE4M3, Fp8Format::kE5M2})
        for (bool rowwise : {false, true})
          for (bool transpose : {false, true}) {
            const at::Tensor x = spread(s, t, 3);
            const auto k = model::fp8_quantize(x, f, rowwise, transpose, Fp8Impl::kAuto);
            const auto c = model::fp8_quantize(x, f, rowwise, transpose, Fp8Impl::kEmulated);
            const std::string what =
                std::to_string(s[0]) + "x" + std::to_string(s[1]) + " " + c10::toString(t) +
                (f == Fp8Format::kE4M3 ? " e4m3" : " e5m2") +
                (rowwise ? " rowwise" : " tensorwise") + (transpose ? " transposed" : "");
            ASSERT_EQ(k.q.sizes(), c.q.sizes()) << what;
            EXPECT_TRUE(at::equal(k.q.view(at::kByte), c.q.view(at::kByte))) << what;
            EXPECT_TRUE(at::equal(k.inv, c.inv)) << what;
          }
}

// The column-wise cast (rowwise --fp8's x^T for the weight gradient) against the GEMM it feeds, at
// a 7B projection's input of 2 x 4096 tokens: the cast must be a small part of the GEMM's time
// (bench/gpu_suite.sh --parts fp8 reads the "fp8 timing:" line).
TEST(GpuFp8, TimesTheColumnwiseCastAgainstItsGemm) {
  SKIP_WITHOUT_FP8_GPU();
  const int64_t tokens = 8192, in = 4096, out = 4096;
  const at::Tensor x = spread({tokens, in}, at::kBFloat16, 7);
  const at::Tensor dy = spread({tokens, out}, at::kBFloat16, 8);
  const auto xt = model::fp8_quantize(x, Fp8Format::kE4M3, /*rowwise=*/true, /*transpose=*/true);
  const auto dyt = model::fp8_quantize(dy, Fp8Format::kE5M2, true, true);
  const double cast = time_ms(
      [&] { model::fp8_quantize(x, Fp8Format::kE4M3, /*rowwise=*/true, /*transpose=*/true); });
  const double gemm = time_ms([&] { model::fp8_matmul(dyt, xt, at::kBFloat16); });  // dW [out, in]
  const double bf16 = time_ms([&] { at::mm(dy.t(), x); });
  char line[256];
  std::snprintf(line, sizeof line,
                "fp8 timing: column-wise cast of [%lld, %lld] bf16 %.3f ms; the rowwise float8 "
                "weight-gradient GEMM it feeds %.3f ms (bf16: %.3f ms); cast/GEMM %.2f",
                static_cast<long long>(tokens), static_cast<long long>(in), cast, gemm, bf16,
                cast / gemm);
  std::printf("%s\n", line);
  RecordProperty("timing", line);
  EXPECT_GT(gemm, 0.0);
}

// Tensorwise --fp8's float8 all-gather of a Llama-2 7B layer over 8 ranks (one GPU plays rank 0
// and decodes all 8 shards from its own bytes): the encode (amax, exchange left out, cast) and the
// decode, against the bytes it saves (bench/gpu_suite.sh --parts fp8 reads the line). One GPU has
// no gather to time; the multi-rank equality is FsdpMpi.Fp8AllGatherTrainsWhatTheComputeDtype...
TEST(GpuFp8, TimesTheFloat8GatherCodec) {
  SKIP_WITHOUT_FP8_GPU();
  const model::ModelConfig m = model::model_preset("llama2-7b");
  const int ranks = 8;
  const fsdp::FlatLayout layout = fsdp::flat_layout(model::llama_param_specs(m), 1, ranks);
  std::vector<model::FlatPiece> pieces;
  for (const fsdp::FlatEntry& e : layout.entries) pieces.push_back({e.name, e.offset, e.numel});
  model::RunPlan run;
  run.fp8 = Fp8Mode::kTensorwise;
  auto codec = run.gather_codec(m, {model::UnitKind::kDecoderLayer, 0}, pieces, layout.padded,
                                ranks, 0, at::kBFloat16);
  ASSERT_NE(codec, nullptr);
  const auto o = at::TensorOptions().device(at::kCUDA);
  const at::Tensor shard = at::randn({layout.shard_numel}, o.dtype(at::kFloat)) * 0.02;
  const at::Tensor send = at::empty({codec->send_bytes()}, o.dtype(at::kByte));
  const at::Tensor stats = codec->statistics(shard).repeat({ranks});
  codec->encode(shard, stats, send);
  const at::Tensor gathered = send.repeat({ranks});
  const at::Tensor full = at::empty({layout.padded}, o.dtype(at::kBFloat16));
  const double enc =
      time_ms([&] { codec->encode(shard, codec->statistics(shard).repeat({ranks}), send); });
  const double dec = time_ms([&] { codec->decode(gathered, full); });
  char line[256];
  std::snprintf(line, sizeof line,
                "fp8 timing: float8 all-gather of a Llama-2 7B layer over %d ranks: %.1f MB on the "
                "wire per rank against %.1f MB in bf16; encode %.3f ms, decode %.3f ms",
                ranks, codec->send_bytes() / 1e6, layout.shard_numel * 2 / 1e6, enc, dec);
  std::printf("%s\n", line);
  RecordProperty("gather_timing", line);
  EXPECT_LT(codec->send_bytes(), layout.shard_numel * 2 * 0.55) << "about half of bf16's";
}

TEST(GpuFp8, ScaledMmFollowsTheEmulatedGemm) {
  SKIP_WITHOUT_FP8_GPU();
  const at::Tensor a = spread({256, 512}, at::kBFloat16, 1),
                   b = spread({384, 512}, at::kBFloat16, 2);
  for (bool rowwise : {false, true}) {
    const auto qa = model::fp8_quantize(a, Fp8Format::kE5M2, rowwise, false);
    const auto qb = model::fp8_quantize(b, Fp8Format::kE4M3, rowwise, false);
    const at::Tensor mine = model::fp8_matmul(qa, qb, at::kBFloat16, Fp8Impl::kAuto);
    const at::Tensor ref = model::fp8_matmul(qa, qb, at::kFloat, Fp8Impl::kEmulated);
    // Only the bf16 output's rounding (2^-9 relative) and the summation order differ.
    EXPECT_LT(rel(mine, ref), 4e-3) << (rowwise ? "rowwise" : "tensorwise");
  }
}

TEST(GpuFp8, LinearOutputAndGradientsFollowTheEmulation) {
  SKIP_WITHOUT_FP8_GPU();
  // 2 x 100 tokens: not a multiple of 16, so the weight-gradient GEMM runs on padded rows.
  const at::Tensor x0 = spread({2, 100, 256}, at::kBFloat16, 4);
  const at::Tensor w0 = spread({512, 256}, at::kBFloat16, 5) * 0.05;
  const at::Tensor dy = spread({2, 100, 512}, at::kBFloat16, 6) * 1e-3;
  for (Fp8Mode m : {Fp8Mode::kTensorwise, Fp8Mode::kRowwise}) {
    std::vector<at::Tensor> out[2];
    for (Fp8Impl impl : {Fp8Impl::kAuto, Fp8Impl::kEmulated}) {
      const at::Tensor x = x0.clone().requires_grad_(true);
      const at::Tensor w = w0.clone().requires_grad_(true);
      const at::Tensor y = model::fp8_linear(x, w, m, impl);
      y.backward(dy);
      out[static_cast<int>(impl)] = {y.detach(), x.grad(), w.grad()};
    }
    const char* names[] = {"output", "input gradient", "weight gradient"};
    for (int i = 0; i < 3; ++i)
      EXPECT_LT(rel(out[0][i], out[1][i]), 1e-2) << model::fp8_mode_name(m) << " " << names[i];
    EXPECT_GT(rel(out[0][0], at::linear(x0, w0)), 1e-3) << "the float8 GEMM ran, not bf16's";
  }
}

namespace {
std::vector<nlohmann::json> train(const std::string& name, const std::string& extra) {
  return train_at_world_one("gpu_fp8_" + name, "--model small --threads 2 --data " + test_work() +
                                                   "/demo/train.h5 --batch-size 8 --lr 1e-3 "
                                                   "--device cuda " +
                                                   extra);
}

double tail_mean(const std::vector<nlohmann::json>& m, size_t n) {
  double s = 0;
  for (size_t i = m.size() - n; i < m.size(); ++i) s += m[i]["loss"].get<double>();
  return s / static_cast<double>(n);
}
}  // namespace

// Float8 trains as bf16 does: 30 steps of the small preset, the mean loss of the last 10 within 2%
// (the CPU emulation's gap to fp32 is 0.03% to 0.1% on the tiny model at 8 steps).
TEST(GpuFp8, ThirtyStepsFollowBf16) {
  SKIP_WITHOUT_FP8_GPU();
  const auto bf16 = train("bf16", "--steps 30");
  ASSERT_EQ(bf16.size(), 30u);
  for (const char* mode : {"tensorwise", "rowwise"}) {
    const auto f8 = train(mode, std::string("--steps 30 --fp8 ") + mode);
    ASSERT_EQ(f8.size(), 30u) << mode;
    EXPECT_NEAR(f8[0]["loss"].get<double>(), bf16[0]["loss"].get<double>(),
                2e-2 * bf16[0]["loss"].get<double>())
        << mode << " step 1";
    EXPECT_NEAR(tail_mean(f8, 10), tail_mean(bf16, 10), 2e-2 * tail_mean(bf16, 10)) << mode;
    EXPECT_LT(tail_mean(f8, 10), f8[0]["loss"].get<double>()) << mode << " learns";
  }
}

// Nothing in float8 is saved: a checkpoint of an --fp8 run resumes without it, and a bf16 one with.
TEST(GpuFp8, CheckpointsResumeWithAndWithoutFp8) {
  SKIP_WITHOUT_FP8_GPU();
  for (const auto& [first, second] :
       {std::pair{"--fp8 tensorwise", ""}, std::pair{"", "--fp8 rowwise"}}) {
    const auto dir = tmp("gpu_fp8_ckpt");
    std::filesystem::remove_all(dir);
    std::filesystem::remove_all(dir + "_b");  // the resumed run's, from the pair before
    const auto a = train(
        "ckpt_a", std::string("--steps 4 --save-every 2 --checkpoint-dir ") + dir + " " + first);
    ASSERT_EQ(a.size(), 4u);
    const auto b = train("ckpt_b", "--steps 4 --checkpoint-dir " + dir + "_b --resume " + dir +
                                       "/step-00000002.h5 " + second);
    ASSERT_EQ(b.size(), 2u) << first << " -> " << second;
    EXPECT_EQ(b[0]["step"].get<int64_t>(), 3);
    // The resumed steps differ from the whole run's by float8's rounding only.
    EXPECT_NEAR(b[1]["loss"].get<double>(), a[3]["loss"].get<double>(),
                2e-2 * a[3]["loss"].get<double>());
  }
}
