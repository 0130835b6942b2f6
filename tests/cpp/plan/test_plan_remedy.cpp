// When nothing fits, `shardtrain plan` names the cheapest change that fits (full activation
// checkpointing before a context group), and otherwise what binds, without advising what cannot
// help. Each remedy is checked by planning it: it fits, and the cheaper changes do not.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "shardtrain/cli/options.h"
#include "shardtrain/plan/plan_output.h"
#include "shardtrain/plan/planner.h"
#include "shardtrain/plan/remedy.h"

namespace shardtrain::plan {
namespace {

PlanInput planned(std::vector<std::string> args) {
  args.insert(args.begin(), {"--model", "llama3.1-8b"});
  return cli::parse_plan(args, nullptr).input;
}

bool fits(std::vector<std::string> args) { return best_row(plan_rows(planned(args))) != nullptr; }

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& more) {
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

}  // namespace

// 64k tokens on one p5 node: checkpointing alone fits (54 of 75 GiB); no context group is named.
TEST(PlanRemedy, CheckpointingBeforeAContextGroup) {
  const std::vector<std::string> args = {"--seq-len", "65536",      "--nodes",
                                         "1",         "--strategy", "full_shard"};
  const PlanInput in = planned(args);
  const auto rows = plan_rows(in);
  ASSERT_EQ(best_row(rows), nullptr);
  const Remedy r = search_remedy(in, rows);
  ASSERT_TRUE(r.found());
  EXPECT_TRUE(r.checkpointing);
  EXPECT_EQ(r.context_parallel, 0);
  EXPECT_EQ(r.options(), "--activation-checkpointing full");
  EXPECT_TRUE(fits(with(args, {"--activation-checkpointing", "full"})));
  const std::string text = plan_table(in, rows);
  EXPECT_NE(text.find("--activation-checkpointing full fits (full_shard on 1 node(s)"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("--context-parallel"), std::string::npos) << text;
  EXPECT_EQ(plan_json(in, rows)["remedy"]["options"], "--activation-checkpointing full");
  // Checkpointing every other layer: the remedy is every layer, said in full.
  const PlanInput half =
      planned(with(args, {"--activation-checkpointing", "full", "--ac-every", "2"}));
  EXPECT_EQ(search_remedy(half, plan_rows(half)).options(),
            "--activation-checkpointing full --ac-every 1");
}

// 128k tokens on an H200 node: checkpointing alone fits (about 91 of 131 GiB), where the search
// used to name a context group of 8.
TEST(PlanRemedy, CheckpointingFits128kOnH200) {
  const std::vector<std::string> args = {"--seq-len", "131072", "--gpu", "h200-141gb"};
  const PlanInput in = planned(args);
  const auto rows = plan_rows(in);
  ASSERT_EQ(best_row(rows), nullptr);
  const Remedy r = search_remedy(in, rows);
  EXPECT_EQ(r.options(), "--activation-checkpointing full");
  EXPECT_LT(r.best.total, in.gpu.memory_bytes);
  EXPECT_GT(r.best.total, 0.6 * in.gpu.memory_bytes);
}

// 8 rows of 128k per rank: activations alone exceed the GPU at every node count and group size;
// the advice is a smaller row or batch, not more nodes, --cpu-offload or LoRA.
TEST(PlanRemedy, WhenActivationsBindNeitherNodesNorOffloadAreAdvised) {
  const PlanInput in = planned(
      {"--seq-len", "131072", "--batch-size", "8", "--nodes", "1,2,4", "--strategy", "full_shard"});
  const auto rows = plan_rows(in);
  const Remedy r = search_remedy(in, rows);
  ASSERT_TRUE(r.ran);
  EXPECT_FALSE(r.found());
  EXPECT_TRUE(r.activations_bind);
  EXPECT_GT(r.unshardable_bytes, in.gpu.memory_bytes);
  for (const auto& row : rows)  // the bound holds at each node count
    EXPECT_GE(row.total - row.state_at_peak(), r.unshardable_bytes);
  const std::string text = plan_table(in, rows);
  EXPECT_NE(text.find("use a smaller --seq-len or --batch-size"), std::string::npos) << text;
  EXPECT_EQ(text.find("try more nodes"), std::string::npos) << text;
  EXPECT_NE(text.find("no context parallel fits either (tried 2, 4, 8"), std::string::npos) << text;
  EXPECT_TRUE(plan_json(in, rows)["remedy"]["activations_bind"].get<bool>());
}

// One GPU a node: no context group to try, so no empty list of tried sizes; a plan bound by state
// (the full model's unsharded state on one H200) advises more nodes, --cpu-offload and LoRA.
TEST(PlanRemedy, OneGpuANodeNamesNoContextSizesAndAdvisesForTheState) {
  const PlanInput in = planned(
      {"--seq-len", "131072", "--gpus-per-node", "1", "--nodes", "1", "--gpu", "h200-141gb"});
  const auto rows = plan_rows(in);
  const Remedy r = search_remedy(in, rows);
  ASSERT_TRUE(r.ran);
  EXPECT_FALSE(r.found());
  EXPECT_TRUE(r.context_sizes.empty());
  EXPECT_FALSE(r.activations_bind);
  const std::string text = plan_table(in, rows);
  EXPECT_EQ(text.find("tried ,"), std::string::npos) << text;
  EXPECT_EQ(text.find("context parallel"), std::string::npos) << text;
  EXPECT_NE(text.find("nothing fits, even with --activation-checkpointing full: try more nodes"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("--cpu-offload"), std::string::npos) << text;
}

// An offloaded row the host refuses shows the host's headroom, not the device's, and the plan says
// whose host memory it assumed.
TEST(PlanRemedy, AHostBoundRowShowsTheHostsHeadroom) {
  const std::vector<std::string> args = {
      "--seq-len",  "2048",          "--gpus-per-node",
      "1",          "--nodes",       "1",
      "--strategy", "full_shard",    "--activation-checkpointing",
      "full",       "--cpu-offload", "--gpu",
      "h100-80gb"};
  const PlanInput in = planned(with(args, {"--host-memory-gib", "100"}));
  const auto rows = plan_rows(in);
  ASSERT_EQ(rows.size(), 1u);
  ASSERT_FALSE(rows[0].host_fits);
  ASSERT_GT(rows[0].headroom, 0) << "the device alone would fit";
  char want[32];
  std::snprintf(
      want, sizeof want, "NO   %8.2fG",
      (rows[0].host_memory_bytes - static_cast<double>(rows[0].host_bytes_per_node)) / (1 << 30));
  const std::string text = plan_table(in, rows);
  EXPECT_NE(text.find(want), std::string::npos) << want << "\n" << text;
  EXPECT_NE(plan_table(planned(args), plan_rows(planned(args)))
                .find("2048 GiB per node (a p5.48xlarge's, whatever the GPUs per node; give your "
                      "host's with --host-memory-gib)"),
            std::string::npos);
}

}  // namespace shardtrain::plan
