// --activation-checkpointing [none|selective|full] and --ac-every on train and plan: what the
// parser makes of each spelling (the bare flag, a value after it, a config file's old true),
// the refusals (exit 2, one line naming the option), and the binary training alike with each.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "parser_refusal.h"
#include "run_binary.h"
#include "shardtrain/cli/options.h"

using namespace shardtrain;
using namespace testing_support;
using fsdp::Recompute;

namespace {
const std::string kDemo = std::string(SHARDTRAIN_TEST_TMP) + "/demo";

fsdp::ActivationCheckpointing train_ac(std::vector<std::string> args) {
  args.insert(args.begin(), {"--model", "tiny", "--data", kDemo + "/train.h5"});
  return cli::parse_train(args, nullptr).fsdp.activation_checkpointing;
}

fsdp::ActivationCheckpointing plan_ac(std::vector<std::string> args) {
  args.insert(args.begin(), {"--model", "tiny", "--seq-len", "128"});
  return cli::parse_plan(args, nullptr).input.fsdp.activation_checkpointing;
}

std::vector<double> losses(const std::string& metrics) {
  std::vector<double> out;
  for (const auto& row : read_jsonl(metrics))
    if (row.contains("loss") && row.contains("step")) out.push_back(row["loss"].get<double>());
  return out;
}
}  // namespace

TEST(CheckpointingCli, EverySpellingParses) {
  EXPECT_EQ(train_ac({}).mode, Recompute::kNone);
  EXPECT_EQ(train_ac({"--activation-checkpointing"}).mode, Recompute::kFull);  // the former switch
  EXPECT_EQ(train_ac({"--activation-checkpointing", "--lr", "1e-3"}).mode, Recompute::kFull);
  EXPECT_EQ(train_ac({"--activation-checkpointing", "selective"}).mode, Recompute::kSelective);
  EXPECT_EQ(train_ac({"--activation-checkpointing=none"}).mode, Recompute::kNone);
  const auto every = train_ac({"--activation-checkpointing=selective", "--ac-every", "2"});
  EXPECT_EQ(every.mode, Recompute::kSelective);
  EXPECT_EQ(every.every, 2);
  EXPECT_TRUE(every.selective(0));
  EXPECT_FALSE(every.selective(1));
  EXPECT_TRUE(every.selective(4));
  EXPECT_FALSE(every.full(0));
  // A config file: the new values, and the true/false that the former switch took there.
  const std::string cfg = tmp("ac.cfg");
  std::ofstream(cfg) << "activation-checkpointing = full\nac-every = 3\n";
  const auto from_file = train_ac({"--config", cfg});
  EXPECT_EQ(from_file.mode, Recompute::kFull);
  EXPECT_EQ(from_file.every, 3);
  std::ofstream(cfg) << "activation-checkpointing = true\n";
  EXPECT_EQ(train_ac({"--config", cfg}).mode, Recompute::kFull);
  std::ofstream(cfg) << "activation-checkpointing = false\n";
  EXPECT_EQ(train_ac({"--config", cfg}).mode, Recompute::kNone);
  // plan takes the same.
  EXPECT_EQ(plan_ac({"--activation-checkpointing"}).mode, Recompute::kFull);
  const auto planned = plan_ac({"--activation-checkpointing", "selective", "--ac-every", "2"});
  EXPECT_EQ(planned.mode, Recompute::kSelective);
  EXPECT_EQ(planned.every, 2);
}

TEST(CheckpointingCli, BadValuesExit2NamingTheOption) {
  for (const std::string cmd : {"train --model tiny", "plan --model tiny"}) {
    expect_usage_error(cmd + " --activation-checkpointing partial",
                       "--activation-checkpointing must be none, selective or full");
    expect_usage_error(cmd + " --activation-checkpointing=sometimes", "got 'sometimes'");
    expect_usage_error(cmd + " --activation-checkpointing --ac-every 0",
                       "--ac-every must be 1 or more");
    expect_usage_error(cmd + " --activation-checkpointing full --ac-every=-2",
                       "--ac-every must be 1 or more");
    expect_usage_error(cmd + " --ac-every 2",
                       "--ac-every 2 needs --activation-checkpointing selective or full");
    expect_usage_error(cmd + " --activation-checkpointing full --ac-every two", "--ac-every");
  }
}

TEST(CheckpointingCli, HelpShowsTheBareFlagAndTheDefault) {
  for (const char* cmd : {"train --help", "plan --help"}) {
    const Result r = run(cmd);
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("--activation-checkpointing [=arg(=full)] (=none)"), std::string::npos)
        << cmd << "\n"
        << r.out;
    EXPECT_NE(r.out.find("--ac-every arg (=1)"), std::string::npos) << cmd;
  }
  const std::string table = run("train --help-defaults").out;
  EXPECT_NE(table.find("| `--activation-checkpointing` | `none` |"), std::string::npos) << table;
  EXPECT_NE(table.find("| `--ac-every` | `1` |"), std::string::npos) << table;
}

// The binary trains the same losses with each setting, and its banner says which it runs.
TEST(CheckpointingCli, TrainingGivesTheSameLossesWithEachSetting) {
  const std::string common = "train --model tiny --data " + kDemo +
                             "/train.h5 --steps 3 --batch-size 4 --threads 1 "
                             "--val-batches 0 --warmup-steps 0 --lr 1e-3 --seed 3 --metrics-file ";
  const std::vector<std::pair<std::string, std::string>> settings = {
      {"", "activation checkpointing off"},
      {" --activation-checkpointing selective", "activation checkpointing selective"},
      {" --activation-checkpointing", "activation checkpointing full"},
      {" --activation-checkpointing=selective --ac-every 2",
       "activation checkpointing selective on layers 0, 2, 4, ..."}};
  std::vector<double> none;
  for (size_t i = 0; i < settings.size(); ++i) {
    const std::string metrics = tmp("ac_cli_" + std::to_string(i) + ".jsonl");
    const Result r = run(common + metrics + settings[i].first);
    ASSERT_EQ(r.code, 0) << settings[i].first << "\n" << r.out;
    EXPECT_NE(r.out.find(settings[i].second), std::string::npos) << r.out;
    const std::vector<double> l = losses(metrics);
    ASSERT_EQ(l.size(), 3u) << metrics;
    if (i == 0) none = l;
    // The first loss comes before any update: the same forward values. Later ones follow Adam,
    // which scales gradients that are summation-order noise up to lr (as FsdpMpi's tolerances
    // explain).
    EXPECT_EQ(l[0], none[0]) << settings[i].first;
    for (size_t s = 1; s < l.size(); ++s)
      EXPECT_NEAR(l[s], none[s], 1e-5 * none[s]) << settings[i].first << " step " << s + 1;
  }
}
