// `plan --objective dpo`: two rows per pair, the chunked head's recompute, the reference model's
// memory (a frozen sharded copy under full fine-tuning, none under LoRA or with --reference-logps)
// and its forward per micro-batch. References are SFT's own rows and Llama 3.1 8B's shapes, not the
// planner's DPO code.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "plan_refusal.h"
#include "shardtrain/cli/options.h"
#include "shardtrain/plan/plan_output.h"
#include "shardtrain/plan/planner.h"
#include "shardtrain/plan/remedy.h"
#include "shardtrain/runtime/error.h"

namespace shardtrain::plan {
namespace {

PlanInput planned(std::vector<std::string> args) {
  args.insert(args.begin(), {"--model", "llama3.1-8b", "--strategy", "full_shard", "--nodes", "1"});
  return cli::parse_plan(args, nullptr).input;
}

PlanRow row_of(const PlanInput& in) {
  const auto rows = plan_rows(in);
  EXPECT_EQ(rows.size(), 1u);
  return rows.front();
}

PlanRow row(const std::vector<std::string>& args) { return row_of(planned(args)); }

}  // namespace

// Llama 3.1 8B's head: vocabulary x hidden.
constexpr int64_t kHeadNumel = int64_t{128256} * 4096;

// Full fine-tuning: the frozen copy is a second engine's fp32 parameter shards, 4 bytes per
// parameter over the 8 ranks of a node (plus the flat units' padding), and nothing else of it is
// held at the training passes' peak.
TEST(PlanDpo, FullFineTuningHoldsAFrozenCopyOfTheParameterShards) {
  const PlanInput in = planned({"--objective", "dpo"});
  const PlanRow dpo = row_of(in), sft = row({});
  const PlanRow logps = row({"--objective", "dpo", "--reference-logps", "ref-logps.h5"});
  const int64_t shard_params = in.model.num_params() / 8;
  EXPECT_GE(dpo.reference, 4 * shard_params);
  EXPECT_LT(dpo.reference, 4 * shard_params + (int64_t{1} << 20));  // padding: a few elements
  EXPECT_EQ(dpo.reference, sft.state.param_bytes);  // the policy's own fp32 shards, once more
  EXPECT_EQ(dpo.reference_host, 0);
  EXPECT_GE(dpo.total - sft.total, dpo.reference);
  EXPECT_EQ(dpo.tensor_peak, logps.tensor_peak + dpo.reference);
  EXPECT_LT(dpo.reference_peak, dpo.tensor_peak);  // the reference forward holds no activations
  // Unfused (--loss-chunk off): SFT's 2 rows plus the copy, exactly.
  const PlanRow off = row({"--objective", "dpo", "--loss-chunk", "off"});
  const PlanRow same_rows = row({"--batch-size", "2", "--loss-chunk", "off"});
  EXPECT_EQ(off.tensor_peak, same_rows.tensor_peak + off.reference);
  EXPECT_GE(off.total - same_rows.total, off.reference);
  // The copy is its own column and is named under the table.
  const std::string text = plan_table(in, {dpo});
  EXPECT_NE(text.find("ref."), std::string::npos) << text;
  EXPECT_NE(text.find("a frozen sharded copy of the starting weights"), std::string::npos) << text;
  const auto j = plan_json(in, {dpo});
  EXPECT_EQ(j["objective"]["reference"], "frozen_copy");
  EXPECT_EQ(j["rows"][0]["memory"]["reference"], dpo.reference);
}

// --reference-logps: no reference model, no reference forward. Unfused, exactly SFT's 2 rows.
TEST(PlanDpo, ReferenceLogpsHoldsNoCopyAndRunsNoReferenceForward) {
  const PlanRow dpo = row({"--objective", "dpo"});
  const PlanRow logps = row({"--objective", "dpo", "--reference-logps", "ref-logps.h5"});
  EXPECT_EQ(logps.reference, 0);
  EXPECT_EQ(logps.reference_peak, 0);
  EXPECT_EQ(logps.reference_s, 0);
  EXPECT_GE(dpo.total - logps.total, dpo.reference);
  const PlanRow off =
      row({"--objective", "dpo", "--reference-logps", "ref-logps.h5", "--loss-chunk", "off"});
  const PlanRow same_rows = row({"--batch-size", "2", "--loss-chunk", "off"});
  EXPECT_EQ(off.tensor_peak, same_rows.tensor_peak);
  EXPECT_EQ(off.total, same_rows.total);
  EXPECT_DOUBLE_EQ(off.step_s, same_rows.step_s);
  const PlanInput in = planned({"--objective", "dpo", "--reference-logps", "ref-logps.h5"});
  EXPECT_EQ(plan_table(in, {logps}).find(" ref."), std::string::npos);
}

// LoRA: the reference is the base with the adapters off, no second copy; its forward still runs.
// The head is frozen: no weight gradient, so nothing more than SFT's head holds.
TEST(PlanDpo, LoraHasNoCopy) {
  const PlanRow dpo = row({"--objective", "dpo", "--lora-rank", "16"});
  const PlanRow same_rows = row({"--batch-size", "2", "--lora-rank", "16"});
  EXPECT_EQ(dpo.reference, 0);
  EXPECT_EQ(dpo.reference_host, 0);
  EXPECT_EQ(dpo.tensor_peak, same_rows.tensor_peak);
  EXPECT_GT(dpo.reference_s, 0);
  const PlanRow off = row({"--objective", "dpo", "--lora-rank", "16", "--loss-chunk", "off"});
  const PlanRow off_rows = row({"--batch-size", "2", "--loss-chunk", "off", "--lora-rank", "16"});
  EXPECT_NEAR(off.step_s, off_rows.step_s + off.reference_s, 1e-12);
}

// Each pair is two rows: DPO --batch-size 3 plans SFT's --batch-size 6 activations, compute and
// tokens (the head unfused in both, where they differ in nothing else); the header and JSON say so.
TEST(PlanDpo, RowsAreDoubled) {
  const PlanInput in = planned({"--objective", "dpo", "--batch-size", "3", "--reference-logps",
                                "ref-logps.h5", "--loss-chunk", "off"});
  EXPECT_EQ(micro_batch_rows(in.objective, in.batch_size), 6);
  const PlanRow dpo = row_of(in);
  const PlanRow same_rows = row({"--batch-size", "6", "--loss-chunk", "off"});
  EXPECT_EQ(dpo.activations, same_rows.activations);
  EXPECT_DOUBLE_EQ(dpo.compute_s, same_rows.compute_s);
  EXPECT_DOUBLE_EQ(dpo.tokens_per_s_per_gpu, same_rows.tokens_per_s_per_gpu);
  EXPECT_EQ(plan_json(in, {dpo})["objective"]["rows_per_micro_batch"], 6);
  EXPECT_NE(plan_table(in, {dpo}).find("batch 3 pairs per rank"), std::string::npos);
  const PlanInput one = planned({"--objective", "dpo", "--reference-logps", "ref-logps.h5"});
  EXPECT_NE(plan_table(one, {row_of(one)}).find("batch 1 pair per rank"), std::string::npos);
}

// The head runs fused like SFT's (model::chunked_row_logps): no [rows, seq, vocab] logits, so the
// activations grow with the vocabulary by far less than the unfused head's 12 bytes per entry per
// token. Its backward adds each chunk's [V, H] product to the fp32 accumulator through an fp32
// copy: 4 bytes x V x H more than SFT's head at the peak.
TEST(PlanDpo, HeadIsChunkedWithOneMoreFp32WeightProduct) {
  const auto grown = [](PlanInput in, int64_t more) {
    in.model.vocab_size += more;
    return row_of(in).activations;
  };
  const int64_t more = 65536, tokens = 2 * 4096;
  const PlanInput dpo = planned({"--objective", "dpo", "--reference-logps", "ref-logps.h5"});
  const PlanInput unfused =
      planned({"--objective", "dpo", "--reference-logps", "ref-logps.h5", "--loss-chunk", "off"});
  EXPECT_LT(grown(dpo, more) - grown(dpo, 0), 12 * more * tokens / 2);
  EXPECT_GE(grown(unfused, more) - grown(unfused, 0), 12 * more * tokens);
  EXPECT_EQ(row_of(dpo).activations - row({"--batch-size", "2"}).activations, 4 * kHeadNumel);
  EXPECT_EQ(plan_json(dpo, {row_of(dpo)})["objective"]["head_recomputes_logits"], true);
  EXPECT_EQ(plan_json(unfused, {row_of(unfused)})["objective"]["head_recomputes_logits"], false);
}

// Compute: the chunked head's backward makes its logits again (2 V H FLOPs per token), and the
// reference model runs one more forward per micro-batch, a third of full fine-tuning's FLOPs (at
// least: its gathers overlap the compute), grad-accum times per step.
TEST(PlanDpo, ReferenceForwardAddsAThirdOfTheCompute) {
  const PlanRow dpo = row({"--objective", "dpo", "--grad-accum", "2"});
  const PlanRow same_rows = row({"--batch-size", "2", "--grad-accum", "2"});
  const double head = 2.0 * kHeadNumel * 2 * 4096 / (989e12 * 0.37);  // per micro-batch
  EXPECT_NEAR(dpo.compute_s - same_rows.compute_s, 2 * head, 1e-9);
  EXPECT_GE(dpo.reference_s, same_rows.compute_s / 3 * (1 - 1e-9));
  EXPECT_LE(dpo.reference_s, same_rows.compute_s / 3 + dpo.comm_s);
  const double more = dpo.step_s - same_rows.step_s - dpo.reference_s;
  EXPECT_GE(more, -1e-12);
  EXPECT_LE(more, 2 * head + 1e-12);
  EXPECT_LT(dpo.tokens_per_s_per_gpu, same_rows.tokens_per_s_per_gpu);
}

// --cpu-offload: the frozen copy's fp32 master, its compute-dtype mirror and the gradient shard
// offload allocates live on the host (4 + 2 + 4 bytes per shard element in bf16); the device
// keeps nothing of it.
TEST(PlanDpo, OffloadedCopyLivesOnTheHost) {
  const PlanRow dpo = row({"--objective", "dpo", "--cpu-offload"});
  const PlanRow sft = row({"--cpu-offload"});
  EXPECT_EQ(dpo.reference, 0);
  EXPECT_EQ(dpo.reference_host, sft.state.host_bytes / (16 + 2) * (4 + 2 + 4));
  EXPECT_EQ(dpo.host_bytes_per_node, (sft.state.host_bytes + dpo.reference_host) * 8);
}

TEST(PlanDpo, RefusedByName) {
  EXPECT_NE(plan_refusal({"--objective", "ppo"}).find("--objective must be sft or dpo"),
            std::string::npos);
  EXPECT_NE(plan_refusal({"--reference-logps", "ref-logps.h5"})
                .find("--reference-logps needs --objective dpo"),
            std::string::npos);
  EXPECT_EQ(plan_refusal({"--objective", "dpo", "--context-parallel", "2"}), "accepted")
      << "DPO splits its rows over a context group as SFT does";
  EXPECT_NE(plan_refusal({"--objective", "dpo", "--packed"}).find("--packed"), std::string::npos);
  // Nothing fits, bound by the state (the model and its frozen reference on one GPU): the advice
  // names --reference-logps; one GPU a node leaves no context group to try.
  const PlanInput in = planned({"--objective", "dpo", "--seq-len", "4096", "--gpus-per-node", "1"});
  const auto rows = plan_rows(in);
  ASSERT_EQ(best_row(rows), nullptr);
  const Remedy r = search_remedy(in, rows);
  EXPECT_TRUE(r.context_sizes.empty());
  EXPECT_FALSE(r.activations_bind);
  EXPECT_NE(plan_table(in, rows).find("--reference-logps (no reference model)"), std::string::npos)
      << plan_table(in, rows);
}

}  // namespace shardtrain::plan
