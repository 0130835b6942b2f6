// `plan --context-parallel`: the ring's bytes per layer worked out here from Llama 3.1 8B's shapes,
// the activations of a rank's share of the row, the smallest context group that fits a 128k row
// on p5, and refusals by name. References are counted here, not by the planner's code.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "plan_refusal.h"
#include "shardtrain/cli/options.h"
#include "shardtrain/model/activation_memory.h"
#include "shardtrain/plan/plan_output.h"
#include "shardtrain/plan/planner.h"
#include "shardtrain/plan/remedy.h"
#include "shardtrain/runtime/error.h"

namespace shardtrain::plan {
namespace {

PlanInput planned(std::vector<std::string> args) {
  args.insert(args.begin(), {"--model", "llama3.1-8b"});
  return cli::parse_plan(args, nullptr).input;
}

PlanRow row(const std::vector<std::string>& args) {
  std::vector<std::string> a = {"--strategy", "full_shard", "--nodes", "1"};
  a.insert(a.end(), args.begin(), args.end());
  const auto rows = plan_rows(planned(a));
  EXPECT_EQ(rows.size(), 1u);
  return rows.front();
}

}  // namespace

// Llama 3.1 8B: 8 kv heads x 128 = 1024 wide K and V. A 131072-token row over 8 ranks: 16384
// tokens each. One K/V hop: 2 tensors x 2 bytes (bf16) x 1024 x 16384 = 67,108,864 bytes; dK/dV
// in fp32: 134,217,728. Forward sends K/V 7 times, backward K/V 7 times and dK/dV 8 times. On p5
// a 64 MiB hop moves at NVIDIA's 370 GB/s (the intra-node all-gather cap; p5 has no latency term).
// A ring step's causal half-block: 16384^2 / 2 x 4 x 32 heads x 128 FLOPs at 37% of 989 TFLOP/s.
TEST(PlanContextParallel, RingBytesPerLayerWorkedByHand) {
  const RingCost k = ring_cost(planned({"--seq-len", "131072", "--context-parallel", "8"}));
  EXPECT_EQ(k.tokens_per_rank, 16384);
  EXPECT_DOUBLE_EQ(k.kv_bytes, 67108864.0);
  EXPECT_DOUBLE_EQ(k.dkv_bytes, 134217728.0);
  EXPECT_DOUBLE_EQ(k.forward_bytes, 469762048.0);
  EXPECT_DOUBLE_EQ(k.backward_bytes, 469762048.0 + 1073741824.0);
  EXPECT_DOUBLE_EQ(k.busbw_gbps, 370);
  EXPECT_NEAR(k.forward_s, 469762048.0 / 370e9, 1e-12);
  EXPECT_NEAR(k.backward_s, (469762048.0 + 1073741824.0) / 370e9, 1e-12);
  const double block = 16384.0 * 16384 / 2 * 4 * 32 * 128 / (989e12 * 0.37);
  EXPECT_NEAR(k.block_forward_s, block, 1e-12);
  EXPECT_NEAR(k.block_backward_s, 2 * block, 1e-12);
  EXPECT_TRUE(k.hidden) << "0.18 ms hops under 6 ms blocks";
  EXPECT_EQ(k.exposed_forward_s, 0);
  EXPECT_NEAR(k.exposed_backward_s, 134217728.0 / 370e9, 1e-12) << "the last dK/dV hop waits";
  // Twice the rows per group, twice every hop.
  const RingCost two =
      ring_cost(planned({"--seq-len", "131072", "--context-parallel", "8", "--batch-size", "2"}));
  EXPECT_DOUBLE_EQ(two.backward_bytes, 2 * k.backward_bytes);
  // Without a group there is no ring.
  EXPECT_EQ(ring_cost(planned({"--seq-len", "131072"})).forward_bytes, 0);
}

// A 4096-token row over 8 ranks: 512 tokens each, a 2 MiB hop against a 6 us block: the ring waits,
// and the step waits for it in every layer, forward and backward.
TEST(PlanContextParallel, ShortRowsExposeTheRing) {
  const PlanInput in = planned({"--seq-len", "4096", "--context-parallel", "8"});
  const RingCost k = ring_cost(in);
  EXPECT_FALSE(k.hidden);
  EXPECT_NEAR(k.exposed_forward_s, 7 * (k.kv_s - k.block_forward_s), 1e-15);
  const PlanRow r = row({"--seq-len", "4096", "--context-parallel", "8"});
  EXPECT_NEAR(r.ring_exposed_s, 32 * (k.exposed_forward_s + k.exposed_backward_s), 1e-12);
  // Full checkpointing recomputes each layer's forward, and its ring, once more.
  const PlanRow ac =
      row({"--seq-len", "4096", "--context-parallel", "8", "--activation-checkpointing", "full"});
  EXPECT_NEAR(ac.ring_exposed_s - r.ring_exposed_s, 32 * k.exposed_forward_s, 1e-12);

  // A fabric whose intra-node links crawl below 4 MiB per rank (the ring's 2 MiB hops) and fly
  // above (FSDP's units): the step is the compute plus the ring's exposed time.
  const std::string fabric = ::testing::TempDir() + "/slow-small-hops.json";
  std::ofstream(fabric) << R"({"format": "shardtrain-fabric", "format_version": 1, "intra": )"
                        << R"({"ranks": 8, "all_gather": [[8388608, 0.1], [33554432, 0.1], )"
                        << R"([67108864, 10000], [17179869184, 10000]], "reduce_scatter": )"
                        << R"([[8388608, 10000], [17179869184, 10000]]}})";
  const PlanRow slow = row({"--seq-len", "4096", "--context-parallel", "8", "--fabric", fabric});
  EXPECT_GT(slow.ring_exposed_s, slow.compute_s) << "0.1 GB/s hops";
  EXPECT_NEAR(slow.step_s, slow.compute_s + slow.ring_exposed_s + slow.optimizer_s,
              0.01 * slow.ring_exposed_s);
}

// Per token of the rank, the ring adds 2 K/V buffers (2 x 2 x 1024 bytes each) and 2 fp32 dK/dV
// buffers (2 x 4 x 1024) to a layer's backward. Rows pad to a multiple of 2N.
TEST(PlanContextParallel, ActivationsFollowTheRanksTokens) {
  const model::ModelConfig m = model::model_preset("llama3.1-8b");
  const model::ActivationBytes a = model::activation_bytes_per_token(m, 2);
  const model::ActivationBytes c = model::with_context_parallel(a, m, 2, 4);
  EXPECT_EQ(c.layer_backward - a.layer_backward, 2 * 2 * 2 * 1024 + 2 * 2 * 4 * 1024);
  EXPECT_EQ(c.layer, a.layer);
  EXPECT_EQ(model::with_context_parallel(a, m, 2, 1).layer_backward, a.layer_backward);
  EXPECT_EQ(model::context_tokens_per_rank(131072, 4), 32768);
  EXPECT_EQ(model::context_tokens_per_rank(4097, 4), 1026) << "4097 pads to 4104";
  EXPECT_EQ(model::context_tokens_per_rank(4097, 1), 4097);

  // A rank of a group of 4 on a 32768-token row holds what a rank on an 8192-token row does, and
  // the ring's buffers while a layer's backward runs: at the peak under full checkpointing (the
  // recomputed layer's backward); without it the peak falls at the loss, where no ring is live.
  const PlanRow one = row({"--seq-len", "32768"});
  const PlanRow four = row({"--seq-len", "32768", "--context-parallel", "4"});
  EXPECT_EQ(four.activations, row({"--seq-len", "8192"}).activations);
  const std::vector<std::string> full = {"--activation-checkpointing", "full"};
  const auto with_full = [&](std::vector<std::string> args) {
    args.insert(args.end(), full.begin(), full.end());
    return row(args);
  };
  EXPECT_EQ(
      with_full({"--seq-len", "32768", "--context-parallel", "4"}).activations,
      with_full({"--seq-len", "8192"}).activations + (2 * 2 * 2 * 1024 + 2 * 2 * 4 * 1024) * 8192);
  // Close to a quarter: the fused loss's weight-gradient accumulator does not scale with tokens.
  const double ratio = static_cast<double>(four.activations) / static_cast<double>(one.activations);
  EXPECT_GT(ratio, 0.25);
  EXPECT_LT(ratio, 0.27);
  // Compute per rank: a quarter of the tokens, each attending over the whole row.
  EXPECT_NEAR(four.compute_s, one.compute_s / 4, 1e-9 * one.compute_s);
  EXPECT_NEAR(four.tokens_per_s_per_gpu, 32768.0 / 4 / four.step_s, 1e-9);
  EXPECT_EQ(four.sharded_state(), one.sharded_state()) << "FSDP shards as without a group";
}

// Llama 3.1 8B at 131072 tokens on p5 (the defaults: h100-80gb, 8 per node): nothing fits at 1,
// with or without checkpointing (90.8 GiB with full); the search names the smallest group that
// does, and planning it fits while the size below it does not.
TEST(PlanContextParallel, SmallestContextParallelThatFits128k) {
  const PlanInput in = planned({"--seq-len", "131072"});
  EXPECT_EQ(in.gpus_per_node, 8);
  EXPECT_EQ(in.fabric.name, "p5");
  const auto rows = plan_rows(in);
  ASSERT_EQ(best_row(rows), nullptr);
  const Remedy s = search_remedy(in, rows);
  ASSERT_TRUE(s.ran);
  EXPECT_TRUE(s.tried_checkpointing) << "full checkpointing alone is tried first, and fails here";
  EXPECT_EQ(s.context_sizes, (std::vector<int>{2, 4, 8}));
  ASSERT_GT(s.context_parallel, 1);
  std::vector<std::string> fit = {"--seq-len", "131072", "--context-parallel",
                                  std::to_string(s.context_parallel)};
  std::vector<std::string> below = {"--seq-len", "131072", "--context-parallel",
                                    std::to_string(s.context_parallel / 2)};
  if (s.checkpointing)
    for (auto* a : {&fit, &below}) a->insert(a->end(), {"--activation-checkpointing", "full"});
  const auto fitting = plan_rows(planned(fit));
  const PlanRow* best = best_row(fitting);
  ASSERT_NE(best, nullptr);
  EXPECT_TRUE(best->fits);
  EXPECT_LE(best->total, 80e9);
  EXPECT_EQ(best->total, s.best.total);
  EXPECT_EQ(best_row(plan_rows(planned(below))), nullptr) << "a smaller group would do";
  const std::string text = plan_table(in, rows);
  EXPECT_NE(text.find("smallest context parallel that fits: " + std::to_string(s.context_parallel)),
            std::string::npos)
      << text;
  EXPECT_EQ(plan_json(in, rows)["smallest_context_parallel"]["size"], s.context_parallel);
  // Given, the plan is taken as asked: no context search.
  const PlanInput given = planned({"--seq-len", "131072", "--context-parallel", "1"});
  EXPECT_FALSE(search_remedy(given, plan_rows(given)).context_searched);
}

TEST(PlanContextParallel, RefusedByNameUnlessItDividesTheNode) {
  EXPECT_NE(plan_refusal({"--context-parallel", "3"})
                .find("--context-parallel 3 does not divide --gpus-per-node 8"),
            std::string::npos);
  EXPECT_NE(plan_refusal({"--context-parallel", "16"}).find("--context-parallel 16"),
            std::string::npos)
      << "a group spans one node only";
  EXPECT_NE(plan_refusal({"--context-parallel", "0"}).find("--context-parallel"),
            std::string::npos);
  EXPECT_NE(plan_refusal({"--context-parallel", "two"}).find("--context-parallel"),
            std::string::npos);
  EXPECT_NE(plan_refusal({"--context-parallel", "2", "--packed"}).find("--context-parallel"),
            std::string::npos);
  EXPECT_EQ(plan_refusal({"--context-parallel", "3", "--gpus-per-node", "6"}), "accepted");
}

}  // namespace shardtrain::plan
