// The trackers' scalars of a metrics line: every numeric leaf under its '/'-joined key path,
// against tag lists written out by hand from the JSONL format.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "shardtrain/train/metric_scalars.h"
#include "shardtrain/train/metrics.h"

using namespace shardtrain;

namespace {
std::vector<std::pair<std::string, double>> pairs(const std::vector<train::MetricScalar>& s) {
  std::vector<std::pair<std::string, double>> out;
  for (const auto& x : s) out.emplace_back(x.tag, x.value);
  return out;
}
}  // namespace

TEST(MetricScalars, NestedLeavesJoinedBySlashStepAndNonNumbersLeftOut) {
  // A 2-rank line as the JSONL file holds it (shortened), with a string, a flag and a rank index.
  const auto line = nlohmann::json::parse(R"({"step":7,"loss":6.25,"lr":8e-05,"skipped":true,
    "comm":{"world":{"all_reduce":{"bytes":16,"calls":2}}},
    "memory":{"peak_bytes_by_phase":{"forward":6693632},"peak_bytes_by_phase_counts":"engine_tensors"},
    "straggler":{"host":"vm","rank":1},"sizes":[3,"x",4.5],"gone":null})");
  const std::vector<std::pair<std::string, double>> want = {
      {"comm/world/all_reduce/bytes", 16},
      {"comm/world/all_reduce/calls", 2},
      {"loss", 6.25},
      {"lr", 8e-05},
      {"memory/peak_bytes_by_phase/forward", 6693632},
      {"sizes/0", 3},
      {"sizes/2", 4.5},
      {"straggler/rank", 1}};
  EXPECT_EQ(pairs(train::metric_scalars(line)), want);
}

TEST(MetricScalars, EveryFigureOfAStepLineIncludingValidationAndPhases) {
  train::StepMetrics m;
  m.step = 3;
  m.loss = 2.5;
  m.val_loss = 2.75;
  m.val_accuracy = 0.5;
  m.phases[runtime::Phase::kForward] = 0.125;
  m.peak_mem_bytes = int64_t{1} << 40;  // past float32's exact integers: kept as a double here
  const auto scalars = train::metric_scalars(train::metrics_line(m));
  std::map<std::string, double> got;
  for (const auto& s : scalars) got[s.tag] = s.value;
  EXPECT_EQ(got.count("step"), 0u);
  EXPECT_EQ(got.at("loss"), 2.5);
  EXPECT_EQ(got.at("val_loss"), 2.75);
  EXPECT_EQ(got.at("val_exact_match"), 0.5);
  EXPECT_EQ(got.at("phases/forward"), 0.125);
  EXPECT_EQ(got.at("phases/checkpoint"), 0.0);
  EXPECT_EQ(got.at("peak_mem_bytes"), 1099511627776.0);
  // The line's 11 top-level figures less step, skipped_steps, eta_s, 6 phases, 2 validation
  // figures.
  EXPECT_EQ(scalars.size(), 10u + 2u + 6u + 2u);
}

TEST(MetricScalars, TheInitialLineHasNoPhasesAndANonObjectHasNoScalars) {
  train::StepMetrics m;  // step 0: the line before training
  m.val_loss = 3.0;
  const auto got = pairs(train::metric_scalars(train::metrics_line(m)));
  for (const auto& [tag, v] : got) EXPECT_NE(tag.rfind("phases/", 0), 0u) << tag;
  EXPECT_EQ(got.back(), (std::pair<std::string, double>{"val_loss", 3.0}));
  EXPECT_TRUE(train::metric_scalars(nlohmann::json::array({1, 2})).empty());
}
