// MLflow's points of the metrics lines (HeldPoints): from the sent points alone, the latest point
// at or before each step gives that step's value for every series of every line; every sent point
// is one of the lines'; a value's last step before it changes is sent (a step, not a ramp).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <random>

#include "shardtrain/train/held_points.h"

using namespace shardtrain;

namespace {

using Line = std::vector<train::MetricScalar>;

// The value MLflow shows for tag at step: its latest point at or before step.
const obs::MlflowMetric* latest(const std::vector<obs::MlflowMetric>& sent, const std::string& tag,
                                int64_t step) {
  const obs::MlflowMetric* best = nullptr;
  for (const auto& p : sent)
    if (p.key == tag && p.step <= step && (!best || p.step >= best->step)) best = &p;
  return best;
}

bool same(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }

}  // namespace

TEST(HeldPoints, EveryStepsValueFollowsFromTheSentPointsAndFewerAreSent) {
  std::mt19937 gen(7);
  std::map<int64_t, Line> lines;
  double loss = 6.0;
  for (int64_t step = 1; step <= 200; ++step) {
    Line l = {
        {"loss", loss -= 0.01},                            // changes every step
        {"memory/param_bytes", 316032},                    // never changes
        {"comm/calls", step % 50 == 0 ? 9.0 : 7.0},        // changes for one step
        {"tokens", static_cast<double>(200 + gen() % 3)},  // changes now and then
        {"grad_norm", step >= 120 && step < 130 ? std::numeric_limits<double>::quiet_NaN() : 1.5}};
    if (step % 40 == 0 || step == 1)
      l.push_back({"val_loss", step < 100 ? 5.0 : 4.0});  // some lines only, held
    lines[step] = l;
  }
  train::HeldPoints held;
  std::vector<obs::MlflowMetric> sent;
  size_t given = 0;
  for (const auto& [step, l] : lines) {
    held.add(step, 1000 + step, l, sent);
    given += l.size();
    if (step % 25 == 0) held.flush(sent);
  }
  held.flush(sent);
  for (const auto& [step, l] : lines)
    for (const auto& s : l) {
      const auto* p = latest(sent, s.tag, step);
      ASSERT_TRUE(p) << s.tag << " has no point at or before step " << step;
      EXPECT_TRUE(same(p->value, s.value))
          << s.tag << " at step " << step << ": " << p->value << " shown, " << s.value << " logged";
    }
  for (const auto& p : sent) {
    const Line& l = lines.at(p.step);
    bool found = false;
    for (const auto& s : l) found = found || (s.tag == p.key && same(s.value, p.value));
    EXPECT_TRUE(found) << "sent " << p.key << " = " << p.value << " at step " << p.step
                       << " is not a logged point";
    EXPECT_EQ(p.timestamp_ms, 1000 + p.step) << "a point keeps its line's time";
  }
  // comm/calls: 7 until step 49, 9 at 50, 7 at 51: the points 49 and 51 make a step, not a ramp.
  for (int64_t s : {49, 50, 51, 99, 100, 101})
    EXPECT_TRUE(latest(sent, "comm/calls", s)->step == s) << "comm/calls at " << s;
  size_t constant = 0;
  for (const auto& p : sent) constant += p.key == "memory/param_bytes";
  EXPECT_EQ(constant, 1u + 200u / 25)
      << "a constant series: its first point and one per flush (steps 1, 25, 50, ... 200)";
  EXPECT_LT(sent.size(), given * 3 / 4) << "most held values are not sent";
}

TEST(HeldPoints, AFlushSendsEachHeldLatestPointOnce) {
  train::HeldPoints held;
  std::vector<obs::MlflowMetric> sent;
  held.add(1, 10, {{"a", 1}, {"b", 2}}, sent);
  held.add(2, 20, {{"a", 1}, {"b", 3}}, sent);
  held.add(3, 30, {{"a", 1}},
           sent);  // b gone from this line: its held latest is step 2's, already sent
  ASSERT_EQ(sent.size(), 3u);
  held.flush(sent);
  ASSERT_EQ(sent.size(), 4u);
  EXPECT_EQ(sent[3].key, "a");
  EXPECT_EQ(sent[3].step, 3);
  EXPECT_EQ(sent[3].timestamp_ms, 30);
  held.flush(sent);
  EXPECT_EQ(sent.size(), 4u) << "nothing held back after a flush";
}
