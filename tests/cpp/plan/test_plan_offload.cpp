// `plan --cpu-offload`: where the trainable state goes (host or device), what the device keeps,
// the fits it changes, and the host memory that refuses a row. References are counted here from
// the models' shapes, not by the planner's code.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "shardtrain/cli/options.h"
#include "shardtrain/fsdp/memory_model.h"
#include "shardtrain/model/activation_memory.h"
#include "shardtrain/model/params.h"
#include "shardtrain/model/run_plan.h"
#include "shardtrain/plan/planner.h"
#include "shardtrain/runtime/error.h"

namespace shardtrain::plan {
namespace {

constexpr double kGiB = 1073741824.0;

// Parameters of a Llama decoder from its shapes (q, o; k, v; the MLP; two norms per layer).
int64_t llama_params(int64_t vocab, int64_t hidden, int64_t inter, int64_t layers, int64_t heads,
                     int64_t kv_heads) {
  const int64_t kv = hidden / heads * kv_heads;
  const int64_t layer = 2 * hidden * hidden + 2 * hidden * kv + 3 * hidden * inter + 2 * hidden;
  return layers * layer + 2 * vocab * hidden + hidden;
}

PlanInput planned(std::vector<std::string> args) {
  args.insert(args.begin(), "--strategy");
  args.insert(args.begin() + 1, "full_shard");
  return cli::parse_plan(args, nullptr).input;
}

fsdp::TrainingSizes tiny_sizes(int shard, int64_t lora_rank) {
  const model::ModelConfig m = model::model_preset("tiny");
  model::LoraConfig lora;
  lora.rank = lora_rank;
  return fsdp::TrainableLayout(m, model::RunPlan{lora}.trained(m)).sizes(shard);
}

// The tiny preset has 158016 parameters, 79008 per rank over 2 with no padding (the hand-worked
// MemoryModel.TinyMemoryReportWorkedOutByHand): offloaded, 4 + 8 + 4 + e bytes each go to the
// host and nothing stays on the device.
TEST(PlanOffload, TrainableStateMovesToTheHost) {
  for (const int elt : {2, 4}) {
    const fsdp::MemoryReport on = fsdp::persistent_bytes(tiny_sizes(2, 0), false, elt, true);
    const fsdp::MemoryReport off = fsdp::persistent_bytes(tiny_sizes(2, 0), false, elt);
    EXPECT_EQ(on.host_bytes, (16 + elt) * 79008) << elt;
    EXPECT_EQ(on.param_bytes + on.grad_bytes + on.optimizer_bytes, 0);
    EXPECT_EQ(on.persistent(), 0);
    EXPECT_EQ(off.host_bytes, 0);
    EXPECT_EQ(off.param_bytes + off.grad_bytes + off.optimizer_bytes, 16 * 79008);
    EXPECT_EQ(on.unsharded_bytes, off.unsharded_bytes);
  }
  // No-sync buffers are the device's still (4 x the 158016 unsharded elements).
  EXPECT_EQ(fsdp::persistent_bytes(tiny_sizes(2, 0), true, 2, true).persistent(), 4 * 158016);
}

// LoRA rank 8 on q_proj and v_proj of the tiny preset (hidden 64, 2 of 4 heads for k and v: 32
// wide), over one rank: per layer q's A [8, 64] and B [64, 8], v's A [8, 64] and B [32, 8],
// 1792 elements, 3584 in its 2 layers. Only they go to the host; the frozen base (158016 in bf16)
// stays on the device, and is all the device keeps.
TEST(PlanOffload, LoraOffloadsOnlyTheAdapters) {
  const fsdp::MemoryReport on = fsdp::persistent_bytes(tiny_sizes(1, 8), false, 2, true);
  const fsdp::MemoryReport off = fsdp::persistent_bytes(tiny_sizes(1, 8), false, 2);
  EXPECT_EQ(on.host_bytes, 18 * 3584);
  EXPECT_EQ(off.param_bytes + off.grad_bytes + off.optimizer_bytes, 16 * 3584);
  EXPECT_EQ(on.base_bytes, 2 * 158016);
  EXPECT_EQ(off.base_bytes, on.base_bytes);
  EXPECT_EQ(on.persistent(), on.base_bytes);
}

// On the device during the step: no gradient shard beyond the two most recently reduced units'
// (each copied to the host behind the next reduction), and while a prefetch's all-gather runs its
// shard copied from the host in the compute dtype.
TEST(PlanOffload, DeviceHoldsTwoGradientShardsAndTheStagedShards) {
  model::ModelConfig m = model::model_preset("tiny");
  m.num_layers = 6;
  const fsdp::TrainingSizes sizes = fsdp::TrainableLayout(m, model::full_training(m)).sizes(4);
  const model::ActivationBytes act = model::activation_bytes_per_token(m, 2);
  fsdp::ShardingConfig cfg;
  cfg.activation_checkpointing.mode = fsdp::Recompute::kFull;  // the peak late in the backward
  fsdp::StepShape shape{1, 64, 1, 2, 4, 4};
  shape.head_chunk = model::RunPlan{}.head_chunk(m, 64);  // the default plan's head
  int64_t largest = 0, all = 0;
  for (const auto& u : sizes.base) {
    largest = std::max(largest, u.shard_numel);
    all += u.shard_numel;
  }
  const fsdp::StepPeak kept = fsdp::step_peak(sizes, cfg, shape, act, 0);
  cfg.cpu_offload = true;
  const fsdp::StepPeak offloaded = fsdp::step_peak(sizes, cfg, shape, act, 0);
  EXPECT_EQ(kept.staging, 0);
  EXPECT_GT(kept.grad_shards, 2 * 4 * largest);  // most of the 8 units' shards exist by then
  EXPECT_LE(offloaded.grad_shards, 2 * 4 * largest);
  EXPECT_LT(offloaded.total_bytes, kept.total_bytes);
  // One prefetch in flight at a time (max_inflight_gathers 2): nothing staged, or one unit's
  // shard in bf16.
  std::vector<int64_t> one_unit = {0};
  for (const auto& u : sizes.base) one_unit.push_back(2 * u.shard_numel);
  for (const auto peak_of : {fsdp::Recompute::kNone, fsdp::Recompute::kFull}) {
    cfg.activation_checkpointing.mode = peak_of;
    const int64_t staged = fsdp::step_peak(sizes, cfg, shape, act, 0).staging;
    EXPECT_NE(std::find(one_unit.begin(), one_unit.end(), staged), one_unit.end()) << staged;
  }
  EXPECT_GT(all, largest);
}

// The docs' example: Llama 3.1 8B (8,030,261,248 parameters) on one H100 80 GB with activation
// checkpointing. 16 bytes per parameter of state (128.5 GB) cannot fit; offloaded, 18 bytes per
// parameter go to the host (a p5's 2 TiB) and the device keeps the gathered units and activations.
TEST(PlanOffload, Llama8BFitsOneH100OnlyWithOffload) {
  const int64_t n = llama_params(128256, 4096, 14336, 32, 32, 8);
  ASSERT_EQ(n, 8030261248);
  const std::vector<std::string> args = {"--model",   "llama3.1-8b", "--gpus-per-node",
                                         "1",         "--nodes",     "1",
                                         "--seq-len", "2048",        "--activation-checkpointing"};
  const std::vector<PlanRow> kept = plan_rows(planned(args));
  std::vector<std::string> with = args;
  with.push_back("--cpu-offload");
  const std::vector<PlanRow> offloaded = plan_rows(planned(with));
  ASSERT_EQ(kept.size(), 1u);
  ASSERT_EQ(offloaded.size(), 1u);
  const PlanRow& k = kept[0];
  const PlanRow& o = offloaded[0];
  EXPECT_EQ(k.sharded_state(), 16 * n);  // one rank: no padding
  EXPECT_FALSE(k.fits);
  EXPECT_TRUE(o.fits);
  EXPECT_TRUE(o.host_fits);
  EXPECT_EQ(o.state.host_bytes, 18 * n);
  EXPECT_EQ(o.host_bytes_per_node, 18 * n);
  EXPECT_EQ(o.host_memory_bytes, 2048 * kGiB);
  EXPECT_EQ(o.sharded_state(), 0);
  EXPECT_LT(o.total, 80e9);
  // Every step copies the bf16 parameters in for the forward and again for the backward (full
  // sharding reshards; the head, lm_head and the final norm, stays gathered), and the fp32
  // gradients out, at 52 GB/s.
  const int64_t head = 128256 * 4096 + 4096;
  EXPECT_NEAR(o.h2d_s, 2.0 * (2 * n - head) / 52e9, 1e-9);
  EXPECT_NEAR(o.d2h_s, 4.0 * n / 52e9, 1e-9);
  EXPECT_GT(o.cpu_optimizer_s, 0);
  EXPECT_GT(o.step_s, k.step_s);  // slower than a GPU that could hold it all
  EXPECT_GT(o.tokens_per_s_per_gpu, 0);
  EXPECT_EQ(best_row(offloaded), &offloaded[0]);
}

// Host memory refuses a row: Llama 3.1 405B offloaded over one p5 node needs 18 bytes per
// parameter per node, past its 2 TiB; over four nodes a quarter of it fits. --host-memory-gib
// replaces the instance's figure.
TEST(PlanOffload, HostMemoryRefusesARow) {
  const int64_t n = llama_params(128256, 16384, 53248, 126, 128, 8);
  const std::vector<std::string> args = {
      "--model", "llama3.1-405b", "--nodes", "1,4", "--activation-checkpointing", "--cpu-offload"};
  const std::vector<PlanRow> rows = plan_rows(planned(args));
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_NEAR(static_cast<double>(rows[0].host_bytes_per_node), 18.0 * n, 18.0 * 8 * 1e6);
  EXPECT_GT(rows[0].host_bytes_per_node, 2048 * kGiB);
  EXPECT_FALSE(rows[0].host_fits);
  EXPECT_FALSE(rows[0].fits);
  EXPECT_TRUE(rows[1].host_fits);
  EXPECT_LT(std::abs(rows[0].host_bytes_per_node / 4 - rows[1].host_bytes_per_node), 18 * 32 * 1e6);

  std::vector<std::string> small = {"--model",
                                    "llama3.1-8b",
                                    "--gpus-per-node",
                                    "1",
                                    "--nodes",
                                    "1",
                                    "--seq-len",
                                    "2048",
                                    "--activation-checkpointing",
                                    "--cpu-offload",
                                    "--host-memory-gib",
                                    "100"};
  const PlanRow r = plan_rows(planned(small))[0];
  EXPECT_EQ(r.host_memory_bytes, 100 * kGiB);
  EXPECT_FALSE(r.host_fits);
  EXPECT_FALSE(r.fits);
  EXPECT_GE(r.headroom, 0);  // the device alone would fit
  EXPECT_THROW(cli::parse_plan({"--model", "llama3.1-8b", "--host-memory-gib", "100"}, nullptr),
               runtime::UsageError);
  EXPECT_THROW(cli::parse_plan(
                   {"--model", "llama3.1-8b", "--cpu-offload", "--host-memory-gib", "-1"}, nullptr),
               runtime::UsageError);
}

}  // namespace
}  // namespace shardtrain::plan
