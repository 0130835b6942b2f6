// `plan --fp8`: the projections' GEMMs at the float8 rate and the casts' bytes at the memory
// bandwidth, worked out here from the model's shapes and the GPU's published peaks; the saved
// projection inputs in one byte; refusals by name. References are counted here, not by the
// planner's code.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "shardtrain/cli/options.h"
#include "shardtrain/model/activation_memory.h"
#include "shardtrain/plan/planner.h"
#include "shardtrain/runtime/error.h"

namespace shardtrain::plan {
namespace {

PlanInput planned(std::vector<std::string> args, const std::string& gpu = "h100-80gb") {
  const std::vector<std::string> common = {"--strategy", "full_shard", "--model", "llama3.1-8b",
                                           "--gpu",      gpu,          "--nodes", "1",
                                           "--seq-len",  "4096"};
  args.insert(args.begin(), common.begin(), common.end());
  return cli::parse_plan(args, nullptr).input;
}

PlanRow row(const std::vector<std::string>& args) {
  const PlanInput in = planned(args);
  in.validate();
  const auto rows = plan_rows(in);
  EXPECT_EQ(rows.size(), 1u);
  return rows.front();
}

}  // namespace

// Llama 3.1 8B, one 4096-token row per rank: per layer the projections hold 218.1M weights
// (q, o 4096^2; k, v 1024 x 4096; gate, up, down 14336 x 4096), so 2 x 218.1M x 4096 of the
// forward's FLOPs move from the bf16 rate (989 TFLOP/s) to the float8 rate (1979) at the same
// efficiency (37%). Tensorwise casts move, per token, 2 + 2 x 2 bytes for each of the 4096 x 6 +
// 14336 input elements (written twice), and each weight 2 x 2 + 1 bytes, in forward; in backward
// the same for the 4096 x 3 + 1024 x 2 + 14336 x 2 output elements; at 3350 GB/s.
TEST(PlanFp8, ComputeMovesToTheFloat8RatePlusTheCasts) {
  const PlanRow off = row({}), on = row({"--fp8", "tensorwise"});
  const double w = 2.0 * 4096 * 4096 + 2.0 * 1024 * 4096 + 3.0 * 14336 * 4096;
  const double t = 4096, rate = 989e12 * 0.37, layers = 32;
  const double gemm = 2 * w * t;
  const double saved = 3 * gemm * (1 - 989.0 / 1979.0) / rate;  // forward and twice in backward
  const double in = 4096.0 * 6 + 14336, out = 4096.0 * 3 + 1024 * 2 + 14336 * 2;
  const double casts = (t * in * 6 + w * 5 + t * out * 6 + w * 5) / 3350e9;
  EXPECT_NEAR(off.compute_s - on.compute_s, layers * (saved - casts), 1e-6 * off.compute_s);
  EXPECT_LT(on.step_s, off.step_s);
  EXPECT_GT(on.step_s, off.step_s / 2) << "attention, the head and the casts stay";
  // Rowwise casts read each activation and gradient element four times, not twice.
  const PlanRow rw = row({"--fp8", "rowwise"});
  EXPECT_NEAR(rw.compute_s - on.compute_s, layers * t * (in + out) * 4 / 3350e9,
              1e-6 * off.compute_s);
}

// The q/k/v input (three float8 copies), o_proj's input (beside SDPA's own output), the MLP input
// (two copies) and the product in one byte, instead of the q/k/v input, the MLP input and the
// product in two: 6 x 4096 + 14336 against 2 x (2 x 4096 + 14336) bytes per token and layer.
TEST(PlanFp8, SavedProjectionInputsTakeOneByte) {
  const model::ModelConfig m = model::model_preset("llama3.1-8b");
  const model::ActivationBytes bf16 = model::activation_bytes_per_token(m, 2);
  const model::ActivationBytes f8 = model::with_fp8(bf16, m, 2, /*merged=*/false, nullptr);
  EXPECT_EQ(bf16.layer - f8.layer, 2 * (2 * 4096 + 14336) - (6 * 4096 + 14336));
  EXPECT_EQ(bf16.layer_selective - f8.layer_selective, bf16.layer - f8.layer);
  // Merged (--fused-layers): one copy of each shared input.
  EXPECT_EQ(bf16.layer - model::with_fp8(bf16, m, 2, true, nullptr).layer,
            2 * (2 * 4096 + 14336) - (3 * 4096 + 14336));
  model::LoraConfig lora;
  lora.rank = 8;
  EXPECT_EQ(model::with_fp8(bf16, m, 2, false, &lora).layer, bf16.layer)
      << "a frozen base keeps none";
  const PlanRow off = row({}), on = row({"--fp8", "rowwise"});
  EXPECT_LT(on.activations, off.activations);
}

TEST(PlanFp8, RefusedByNameWithoutFloat8TensorCores) {
  try {
    planned({"--fp8", "tensorwise"}, "a100-80gb").validate();
    ADD_FAILURE() << "accepted";
  } catch (const runtime::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--fp8 tensorwise: --gpu a100-80gb has no float8"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(planned({"--fp8", "e5m2"}), runtime::UsageError);
}

}  // namespace shardtrain::plan

namespace shardtrain::plan {

// Tensorwise --fp8 all-gathers each layer's projection weights in float8: of a layer's bf16
// gather, the 218.1M weights (counted above) take one byte each, the norms two. Rowwise and
// --no-fp8-all-gather gather bf16 as without --fp8; the embedding and the head always do.
TEST(PlanFp8, TensorwiseGathersTheWeightsInOneByte) {
  const double w = 2.0 * 4096 * 4096 + 2.0 * 1024 * 4096 + 3.0 * 14336 * 4096;
  const int64_t layer = static_cast<int64_t>(w) + 2 * 4096;  // the two RMSNorms' weights
  const PlanInput tw = planned({"--fp8", "tensorwise"});
  EXPECT_EQ(tw.run.gathered_bytes(tw.model, model::UnitKind::kDecoderLayer, layer, 2),
            2.0 * layer - w);
  EXPECT_EQ(tw.run.gathered_bytes(tw.model, model::UnitKind::kHead, 1000, 2), 2000.0);
  const PlanInput bf16 = planned({"--fp8", "tensorwise", "--no-fp8-all-gather"});
  EXPECT_EQ(bf16.run.gathered_bytes(bf16.model, model::UnitKind::kDecoderLayer, layer, 2),
            2.0 * layer);
  const PlanInput rw = planned({"--fp8", "rowwise"});
  EXPECT_EQ(rw.run.gathered_bytes(rw.model, model::UnitKind::kDecoderLayer, layer, 2), 2.0 * layer);
  const PlanRow off = row({}), on = row({"--fp8", "tensorwise"});
  const PlanRow plain = row({"--fp8", "tensorwise", "--no-fp8-all-gather"});
  EXPECT_LT(on.comm_s, off.comm_s) << "the gathers shrink";
  EXPECT_DOUBLE_EQ(plain.comm_s, off.comm_s);
  EXPECT_DOUBLE_EQ(row({"--fp8", "rowwise"}).comm_s, off.comm_s);
}

}  // namespace shardtrain::plan
