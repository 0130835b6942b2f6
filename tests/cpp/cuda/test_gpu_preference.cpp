// DPO on the GPU: the chunked answer log-probabilities (lm_head a chunk of tokens at a time, the
// backward recomputing each chunk) in bf16 against the whole logits in fp32, and train --objective
// dpo at world 1 on CUDA against the same run on the CPU, full (a frozen copy as the reference) and
// LoRA (the adapters switched off). Skipped, with the reason printed, without a GPU.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "gpu_skip.h"
#include "gpu_support.h"
#include "run_binary.h"
#include "shardtrain/model/preference_loss.h"

using namespace testing_support;
using namespace shardtrain;

namespace {

// 64 pairs in TRL's string form: a reversal prompt, the spaced answer chosen over the comma one.
std::string preference_data() {
  const auto jsonl = tmp("gpu_pairs.jsonl"), h5 = tmp("gpu_pairs.h5");
  std::ofstream out(jsonl);
  for (int i = 0; i < 64; ++i) {
    std::vector<int> d = {i % 10, (i * 7 + 3) % 10, (i * 3 + 1) % 10, (i / 10 + 5) % 10};
    std::string in, spaced, commas;
    for (size_t k = 0; k < d.size(); ++k) {
      in += (k ? " " : "") + std::to_string(d[k]);
      spaced += (k ? " " : "") + std::to_string(d[d.size() - 1 - k]);
      commas += (k ? ", " : "") + std::to_string(d[d.size() - 1 - k]);
    }
    out << nlohmann::json{{"prompt", "Reverse the digits: " + in + "\nAnswer:"},
                          {"chosen", " " + spaced},
                          {"rejected", " " + commas}}
               .dump()
        << "\n";
  }
  out.close();
  const auto r = run("prepare --tokenizer " + source("data/demo/tokenizer.model") + " --input " +
                     jsonl + " --format preference --seq-len 64 --output " + h5);
  EXPECT_EQ(r.code, 0) << r.out;
  return h5;
}

std::vector<nlohmann::json> dpo(const std::string& data, const std::string& device,
                                const std::string& extra) {
  return train_at_world_one("gpu_dpo_" + device,
                            "--model tiny --threads 2 --data " + data +
                                " --objective dpo --steps 8 --batch-size 8 --param-dtype bf16 "
                                "--lr 3e-3 --val-batches 0 --log-every 1 --device " +
                                device + " " + extra);
}

}  // namespace

TEST(GpuPreference, ChunkedBf16AnswerLogpsAndGradientsFollowFp32) {
  SKIP_WITHOUT_GPU_OR_CPU_MODE();
  at::manual_seed(0);
  const auto cuda = at::TensorOptions().device(gpu_test_device());
  const int64_t B = 4, T = 80, H = 64, V = 300;
  const at::Tensor h16 = at::randn({B, T, H}, cuda).to(at::kBFloat16);
  const at::Tensor w16 = (at::randn({V, H}, cuda) * 0.05).to(at::kBFloat16);
  at::Tensor labels = at::randint(V, {B, T}, cuda.dtype(at::kLong));
  labels.narrow(1, 0, 20).fill_(-100);     // the prompt
  labels.narrow(1, T - 7, 7).fill_(-100);  // padding
  // Chunked, bf16, chunks that do not divide B * T.
  const at::Tensor h = h16.clone().requires_grad_(true), w = w16.clone().requires_grad_(true);
  const at::Tensor got = model::chunked_row_logps(h, w, labels, 96);
  const at::Tensor up = at::arange(1, B + 1, cuda).to(at::kFloat);  // rows weighted unequally
  (got * up).sum().backward();
  // The whole logits, fp32, over the same bf16 values.
  const at::Tensor h32 = h16.to(at::kFloat).requires_grad_(true),
                   w32 = w16.to(at::kFloat).requires_grad_(true);
  const at::Tensor want = model::row_logps(at::matmul(h32, w32.t()), labels);
  (want * up).sum().backward();
  ASSERT_EQ(got.scalar_type(), at::kFloat);
  ASSERT_EQ(got.sizes(), want.sizes());
  // bf16 inputs on both sides, fp32 sums: only the GEMMs' accumulation order differs.
  EXPECT_LT(rel(got, want), 1e-3) << got << want;
  EXPECT_EQ(h.grad().scalar_type(), at::kBFloat16);
  EXPECT_LT(rel(h.grad(), h32.grad()), 1e-2);  // bf16 gradients: about 3 significant digits
  EXPECT_LT(rel(w.grad(), w32.grad()), 1e-2);
  // The loss on the device equals the CPU's on the same log-probabilities.
  const at::Tensor ref = want.detach() + 0.25 * at::randn({B}, cuda);
  const at::Tensor tokens = model::row_answer_tokens(labels);
  for (auto type : {model::PreferenceLossType::kSigmoid, model::PreferenceLossType::kIpo}) {
    const model::PreferenceConfig cfg{type, 0.1};
    const auto g = model::preference_loss(want.detach(), ref, tokens, cfg);
    const auto c = model::preference_loss(want.detach().cpu(), ref.cpu(), tokens.cpu(), cfg);
    EXPECT_LT((g.losses.cpu() - c.losses).abs().max().item<double>(), 1e-6);
    EXPECT_LT((g.stats.cpu() - c.stats).abs().max().item<double>(), 1e-6);
  }
}

TEST(GpuPreference, DpoStepsOnTheGpuFollowTheCpuFullAndLora) {
  SKIP_WITHOUT_GPU_OR_CPU_MODE();
  const auto data = preference_data();
  for (const std::string extra : {"", "--lora-rank 8"}) {
    const auto gpu = dpo(data, gpu_test_device_flag(), extra), cpu = dpo(data, "cpu", extra);
    ASSERT_EQ(gpu.size(), 8u) << extra;
    ASSERT_EQ(cpu.size(), 8u) << extra;
    // Step 1: the policy is the reference, so the loss is log 2 on both devices.
    EXPECT_NEAR(gpu[0]["loss"].get<double>(), std::log(2.0), 1e-3) << extra;
    for (size_t i = 0; i < gpu.size(); ++i) {
      const double a = gpu[i]["loss"], b = cpu[i]["loss"];
      // bf16 compute on both sides, different kernels: bf16-level drift.
      EXPECT_NEAR(a, b, 3e-2 * std::abs(b) + 2e-3) << extra << " step " << i + 1;
    }
    EXPECT_LT(gpu.back()["loss"].get<double>(), gpu.front()["loss"].get<double>() - 1e-2)
        << extra << ": the GPU run learns the preferred style";
    EXPECT_GT(gpu.back()["rewards/margins"].get<double>(), 0) << extra;
  }
}
