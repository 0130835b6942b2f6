// --cpu-offload on the GPU against the same run without it, through the CLI: 20 bf16 steps, and 4
// steps accumulating 2 micro-batches each, step by step, and where the training state lived.
// Skipped, with the reason printed, without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "gpu_skip.h"
#include "gpu_support.h"
#include "run_binary.h"

using namespace testing_support;

namespace {
std::vector<nlohmann::json> train(const std::string& name, const std::string& extra) {
  return train_at_world_one("gpu_offload_" + name,
                            "--model tiny --threads 2 --data " + test_work() +
                                "/demo/train.h5 --batch-size 8 --param-dtype bf16 --lr 3e-3 "
                                "--device cuda " +
                                extra);
}

// Offload moves AdamW, not the maths: the bf16 forward and backward run the same kernels on the
// same rows, and only the fp32 update's rounding differs (LibTorch's fused CPU AdamW against the
// CUDA one). Step 1 has had no update, so its loss and gradient norm agree but for the norm's
// summation order. After it, a weight whose bf16 copy rounds the other way makes the curves
// wander: on CPU (tiny, bf16, lr 3e-3, 20 steps) changing every update by 1e-7 to 1e-4 of itself
// moved the loss by at most 2.7e-4 at a step and 8.3e-5 on the mean of the last 10, while a
// wrong update crossed these bounds: 1% of lr (step 7), no weight decay (8.2e-4 on the mean),
// no clipping (6.8e-4), eps 1e-6 (7.3e-4). The gradient norm wanders more (7.9e-4), so it is
// compared at step 1 only.
constexpr double kStepRel = 1e-3, kTailRel = 3e-4;

void expect_same_steps(const std::vector<nlohmann::json>& on,
                       const std::vector<nlohmann::json>& off, size_t steps,
                       const std::string& what) {
  ASSERT_EQ(on.size(), steps) << what;
  ASSERT_EQ(off.size(), steps) << what;
  const double l1 = off[0]["loss"], g1 = off[0]["grad_norm"];
  EXPECT_NEAR(on[0]["loss"].get<double>(), l1, 1e-6 * l1) << what << ": step 1, before any update";
  EXPECT_NEAR(on[0]["grad_norm"].get<double>(), g1, 1e-5 * g1) << what << ": step 1's gradients";
  double tail_on = 0, tail_off = 0;
  for (size_t i = 0; i < steps; ++i) {
    const double a = on[i]["loss"], b = off[i]["loss"];
    EXPECT_NEAR(a, b, kStepRel * std::abs(b)) << what << " step " << i + 1;
    if (i + 10 >= steps) {
      tail_on += a;
      tail_off += b;
    }
  }
  if (steps >= 20) {
    EXPECT_NEAR(tail_on, tail_off, kTailRel * tail_off) << what << ": the last 10 steps' mean";
  }
  EXPECT_LT(on.back()["loss"].get<double>(), on.front()["loss"].get<double>()) << what << " learns";
}

// The state left the device: the host holds at least the 16 bytes a parameter of master,
// moments and gradient, and the device's optimizer phase peaks at least 8 bytes a parameter
// lower than without offload (it holds 16 there: master, moments and gradient shards).
void expect_offloaded(const nlohmann::json& on, const nlohmann::json& off) {
  const auto& mem_on = on["memory"];
  const auto& mem_off = off["memory"];
  const int64_t params = mem_off["unsharded_bytes"].get<int64_t>() / 16;
  ASSERT_GT(params, 0);
  EXPECT_GE(mem_on.value("host_bytes", int64_t{0}), 16 * params) << mem_on.dump();
  const int64_t opt_on = mem_on["peak_bytes_by_phase"]["optimizer"];
  const int64_t opt_off = mem_off["peak_bytes_by_phase"]["optimizer"];
  EXPECT_GE(opt_off - opt_on, 8 * params)
      << "optimizer-phase device peak " << opt_on << " with offload, " << opt_off << " without";
}
}  // namespace

TEST(GpuOffload, TwentyBf16StepsFollowTheRunWithoutOffload) {
  SKIP_WITHOUT_GPU();
  const auto on = train("20_on", "--steps 20 --cpu-offload"), off = train("20_off", "--steps 20");
  expect_same_steps(on, off, 20, "20 bf16 steps");
  if (on.size() == 20 && off.size() == 20) expect_offloaded(on.back(), off.back());
}

TEST(GpuOffload, GradAccumulationFollowsTheRunWithoutOffload) {
  SKIP_WITHOUT_GPU();
  const auto on = train("accum_on", "--steps 4 --grad-accum 2 --cpu-offload"),
             off = train("accum_off", "--steps 4 --grad-accum 2");
  expect_same_steps(on, off, 4, "4 steps of 2 micro-batches");
  if (on.size() == 4 && off.size() == 4) expect_offloaded(on.back(), off.back());
}
