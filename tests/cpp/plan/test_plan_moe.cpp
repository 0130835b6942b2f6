// `plan --expert-parallel`: Qwen3-30B-A3B's published shapes; the all-to-all's bytes worked out
// here, the experts' share of the gathers, and refusals by name. References are counted here.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "shardtrain/cli/options.h"
#include "shardtrain/fsdp/trainable_layout.h"
#include "shardtrain/plan/planner.h"
#include "shardtrain/runtime/error.h"

namespace shardtrain::plan {
namespace {

PlanRow row(int expert_parallel) {
  const std::vector<std::string> args = {"--model",           "qwen3-30b-a3b",
                                         "--strategy",        "full_shard",
                                         "--nodes",           "1",
                                         "--seq-len",         "4096",
                                         "--batch-size",      "1",
                                         "--expert-parallel", std::to_string(expert_parallel)};
  const auto rows = plan_rows(cli::parse_plan(args, nullptr).input);
  EXPECT_EQ(rows.size(), 1u);
  return rows.front();
}

}  // namespace

// Qwen3-30B-A3B: 48 sparse layers, hidden 2048, 128 experts of width 768, 8 per token. A 4096-token
// row in bf16: 4096 x 8 x 2048 x 2 = 134,217,728 bytes per all-to-all, 7/8 of it leaving the rank
// at 8 ranks; 4 all-to-alls per layer and micro-batch without recomputation.
TEST(PlanExperts, AllToAllBytesWorkedByHand) {
  const PlanRow one = row(1), eight = row(8);
  EXPECT_EQ(one.all_to_all_s, 0);
  EXPECT_EQ(eight.expert_parallel, 8);
  EXPECT_DOUBLE_EQ(eight.all_to_all_bytes, 48.0 * 4 * 134217728.0 * 7 / 8);
  EXPECT_GT(eight.all_to_all_s, 0);
  // The experts stay sharded over the 8 ranks either way: 128 / 8 experts each over 1 rank, or
  // every expert over 8.
  EXPECT_NEAR(static_cast<double>(eight.sharded_state()), static_cast<double>(one.sharded_state()),
              1e-3 * static_cast<double>(one.sharded_state()));
  EXPECT_LT(eight.gathered, one.gathered);
}

// A layer's unit at --expert-parallel 8 over a shard group of 8: its attention, norms and router
// sharded over 8, and 16 of its 128 experts (3 x 2048 x 768 each) over 8 / 8 = 1 rank.
TEST(PlanExperts, ALayerGathersItsShareOfTheExperts) {
  const model::ModelConfig m = cli::parse_plan({"--model", "qwen3-30b-a3b"}, nullptr).input.model;
  const fsdp::TrainableLayout layout(m, model::RunPlan{}.trained(m));
  const int64_t attention = 2048 * 4096 * 2 + 2048 * 512 * 2, norms = 2 * 128 + 2 * 2048;
  const int64_t dense = attention + norms + 128 * 2048, expert = 3 * 2048 * 768;
  const fsdp::UnitSize all = layout.sizes(8).base[1], mine = layout.sizes(8, 8).base[1];
  EXPECT_EQ(all.numel, dense + 128 * expert);
  EXPECT_EQ(mine.numel, dense + 16 * expert);
  EXPECT_EQ(mine.shard_numel, dense / 8 + 16 * expert);  // dense divides by 8: no padding
  EXPECT_EQ(layout.sizes(8, 4).base[1].shard_numel, dense / 8 + 32 * expert / 2);
}

TEST(PlanExperts, RefusedByNameUnlessItDividesTheShardGroup) {
  for (const char* n : {"3", "16"}) {
    try {
      row(std::stoi(n));
      ADD_FAILURE() << n << " was accepted";
    } catch (const runtime::UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("--expert-parallel"), std::string::npos) << e.what();
    }
  }
}

}  // namespace shardtrain::plan
