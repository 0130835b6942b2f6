// The step profile's arithmetic (train/profile_summary.h) on hand-made timelines.
#include <gtest/gtest.h>

#include "shardtrain/train/profile_summary.h"

using namespace shardtrain;

TEST(ProfileSummary, KindsFromRealKernelNames) {
  EXPECT_EQ(train::kind_by_name("nvjet_tst_256x128_64x4_2x1_v_bz_coopA_TNT"),
            train::KernelKind::kGemm);
  EXPECT_EQ(train::kind_by_name("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64"),
            train::KernelKind::kGemm);
  EXPECT_EQ(train::kind_by_name("aten::mm"), train::KernelKind::kGemm);
  EXPECT_EQ(train::kind_by_name("aten::mmx"), train::KernelKind::kElementwise);
  EXPECT_EQ(train::kind_by_name(
                "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>>"),
            train::KernelKind::kAttention);
  EXPECT_EQ(train::kind_by_name("aten::_scaled_dot_product_flash_attention_for_cpu"),
            train::KernelKind::kAttention);
  EXPECT_EQ(train::kind_by_name(
                "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"),
            train::KernelKind::kCommunication);
  EXPECT_EQ(train::kind_by_name("Memcpy HtoD (Pinned -> Device)"), train::KernelKind::kMemory);
  EXPECT_EQ(
      train::kind_by_name(
          "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>"),
      train::KernelKind::kElementwise);
  EXPECT_EQ(train::kind_by_name("void at::native::(anonymous "
                                "namespace)::multi_tensor_apply_kernel<FusedAdamMathFunctor>"),
            train::KernelKind::kOptimizer);
}

TEST(ProfileSummary, DeviceKernelsSharesGapsAndOptimizerByLaunch) {
  // One compute stream: GEMM 0-100, attention 100-150, idle 150-200, elementwise 200-230, idle,
  // then a kernel launched inside the optimizer range 300-320; NCCL on its own stream 50-250.
  std::vector<train::ProfileEvent> ev = {
      {"nvjet_tst_128x256", 0, 100, 5, 0, true},
      {"flash_fwd_kernel", 100, 150, 6, 0, true},
      {"vectorized_elementwise_kernel", 200, 230, 7, 0, true},
      {"ncclDevKernel_AllGather_RING_LL", 50, 250, 8, 0, true},
      {"vectorized_elementwise_kernel", 300, 320, 1000, 0,
       true},                               // launched at 1000: the optimizer's
      {"aten::mm", 0, 5000, -1, 1, false},  // host ops are not the work on a GPU
  };
  const auto s = train::summarize_profile(ev, {{900, 1100}}, {}, 10);
  ASSERT_TRUE(s.device);
  EXPECT_EQ(s.items, 5);
  EXPECT_EQ(s.span_ns, 320);
  EXPECT_EQ(s.busy_ns, 270);  // 0-250 and 300-320
  EXPECT_DOUBLE_EQ(s.gap_share(), 50.0 / 320);
  EXPECT_DOUBLE_EQ(s.share(train::KernelKind::kGemm), 100.0 / 320);
  EXPECT_DOUBLE_EQ(s.share(train::KernelKind::kAttention), 50.0 / 320);
  EXPECT_DOUBLE_EQ(s.share(train::KernelKind::kElementwise), 30.0 / 320);
  EXPECT_DOUBLE_EQ(s.share(train::KernelKind::kOptimizer), 20.0 / 320);
  EXPECT_DOUBLE_EQ(s.share(train::KernelKind::kCommunication), 200.0 / 320);
  ASSERT_EQ(s.top.size(), 5u);  // the elementwise kernel twice: once as the optimizer's
  EXPECT_EQ(s.top[0].name, "ncclDevKernel_AllGather_RING_LL");
  EXPECT_EQ(s.top[1].kind, train::KernelKind::kGemm);
  // The same kernel inside the GPU's own annotation of the range counts too.
  const auto d = train::summarize_profile(ev, {}, {{290, 330}}, 2);
  EXPECT_DOUBLE_EQ(d.share(train::KernelKind::kOptimizer), 20.0 / 320);
  EXPECT_EQ(d.top.size(), 2u);
}

TEST(ProfileSummary, HostOpsCountTheirOwnTime) {
  // linear 0-100 { mm 10-90 { resolve_conj 20-21 } }, then add 120-140; another thread's op
  // 0-50 overlaps; the optimizer range holds add.
  std::vector<train::ProfileEvent> ev = {
      {"aten::linear", 0, 100, -1, 1, false},       {"aten::mm", 10, 90, -1, 1, false},
      {"aten::resolve_conj", 20, 21, -1, 1, false}, {"aten::add", 120, 140, -1, 1, false},
      {"aten::mul", 0, 50, -1, 2, false},
  };
  const auto s = train::summarize_profile(ev, {{110, 150}}, {}, 10);
  ASSERT_FALSE(s.device);
  EXPECT_EQ(s.span_ns, 140);
  EXPECT_EQ(s.busy_ns, 120);
  EXPECT_EQ(s.kind_ns[static_cast<int>(train::KernelKind::kGemm)],
            20 + 79);  // linear's own 20 and mm's own 79
  EXPECT_EQ(s.kind_ns[static_cast<int>(train::KernelKind::kElementwise)], 1 + 50);
  EXPECT_EQ(s.kind_ns[static_cast<int>(train::KernelKind::kOptimizer)], 20);
  EXPECT_EQ(s.top[0].name, "aten::mm");
  EXPECT_EQ(s.top[0].ns, 79);
  const auto text = train::format_profile(s, 3, "CPU, rank 0");
  EXPECT_NE(text.find("| GEMM | 70.7 |"), std::string::npos) << text;
  EXPECT_NE(text.find("| 1 | `aten::mm` | GEMM | 1 | 0.000 | 56.4 |"), std::string::npos) << text;
}

TEST(ProfileSummary, NothingRecorded) {
  const auto s = train::summarize_profile({}, {}, {}, 10);
  EXPECT_EQ(s.span_ns, 0);
  EXPECT_EQ(s.gap_share(), 0);
  EXPECT_TRUE(s.top.empty());
}
