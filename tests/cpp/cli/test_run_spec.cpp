// The run's compatibility matrix (spec::validate) is written once: each refusal is the same line
// from the function, from `plan` and from `train` (exit 2), and the one function refuses each.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "plan/plan_refusal.h"
#include "run_binary.h"
#include "shardtrain/cli/options.h"
#include "shardtrain/model/config.h"
#include "shardtrain/spec/train_spec.h"
#include "test_paths.h"

using namespace shardtrain;
using namespace testing_support;

namespace {

const std::string kDemo = std::string(SHARDTRAIN_TEST_TMP) + "/demo";

std::string refusal(const spec::TrainSpec& s, const model::ModelConfig& m, bool packed = false) {
  try {
    spec::validate(s, m, packed);
  } catch (const runtime::UsageError& e) {
    return e.what();
  }
  return "accepted";
}

// plan's refusal of args (a space-separated line) for the tiny model.
std::string plan_refusal(const std::string& args) {
  std::vector<std::string> v;
  std::string word;
  for (std::istringstream in(args); in >> word;) v.push_back(word);
  return plan::plan_refusal(v, "tiny");
}

}  // namespace

TEST(RunSpec, EachRefusalIsTheFunctionsLineInPlanAndTrain) {
  const model::ModelConfig tiny = model::model_preset("tiny");
  model::ModelConfig odd = tiny;
  odd.intermediate_size = 180;
  spec::TrainSpec no_sync;
  no_sync.sharding.no_sync_accumulation = true;
  spec::TrainSpec logps;
  logps.reference_logps = "ref.h5";
  spec::TrainSpec rowwise;
  rowwise.run.fp8 = model::Fp8Mode::kRowwise;
  rowwise.sharding.param_dtype = at::kFloat;
  spec::TrainSpec shape;
  shape.run.fp8 = model::Fp8Mode::kTensorwise;
  struct Case {
    std::string args;  // as train and plan take them
    std::string said;  // spec::validate's line
  };
  const std::vector<Case> cases{{"--no-sync-accumulation", refusal(no_sync, tiny)},
                                {"--reference-logps " + kDemo + "/train.h5", refusal(logps, tiny)},
                                {"--fp8 rowwise --param-dtype fp32", refusal(rowwise, tiny)},
                                {"--fp8 tensorwise --intermediate-size 180", refusal(shape, odd)}};
  for (const Case& c : cases) {
    ASSERT_NE(c.said, "accepted") << c.args;
    EXPECT_EQ(plan_refusal(c.args), c.said) << c.args;
    const Result r = run("train --model tiny --threads 1 --steps 1 --device cpu --data " + kDemo +
                         "/train.h5 " + c.args);
    EXPECT_EQ(r.code, 2) << c.args << ": " << r.out;
    EXPECT_EQ(r.out, "shardtrain: error: " + c.said + "\n") << c.args;
  }
  spec::TrainSpec dpo;
  dpo.dpo = true;
  EXPECT_EQ(refusal(dpo, tiny), "accepted");
  EXPECT_NE(refusal(dpo, tiny, /*packed=*/true).find("--objective dpo with --packed"),
            std::string::npos);
  EXPECT_EQ(plan_refusal("--objective dpo --packed"), refusal(dpo, tiny, true));
}
