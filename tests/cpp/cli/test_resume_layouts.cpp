// A resume continues exactly where the run was, at any layout: 4 -> 2 and 2 -> 4 ranks with the
// same flags, another --grad-accum, across epoch boundaries with --epochs. Checked by the sample
// ids each step trained (--log-sample-ids) against an uninterrupted run, by the learning rate at
// the end, and by the losses where the global batch is held; LoRA dropout's masks follow the
// samples, so N ranks equal 1 rank with dropout too. A changed seed or token file is refused.
// --cpu-offload's checkpoints resume without it and back.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "run_binary.h"

using namespace testing_support;

namespace {

std::string mpirun(int np) { return std::string(SHARDTRAIN_MPIEXEC) + std::to_string(np) + " "; }

// A 50-row token file (and a 40-row one) from the shipped demo data: epochs of a few steps.
std::string small_file(int rows) {
  const std::string jsonl = tmp("resume_small_" + std::to_string(rows) + ".jsonl");
  const std::string out = tmp("resume_small_" + std::to_string(rows) + ".h5");
  if (std::filesystem::exists(out)) return out;
  std::ifstream in(source("data/demo/train.jsonl"));
  std::ofstream o(jsonl);
  std::string line;
  for (int i = 0; i < rows && std::getline(in, line); ++i) o << line << "\n";
  o.close();
  const auto r = run("prepare --tokenizer " + source("data/demo/tokenizer.model") + " --input " +
                     jsonl + " --output " + out + " --seq-len 64 --mode padding");
  EXPECT_EQ(r.code, 0) << r.out;
  return out;
}

std::string train_on(const std::string& data) {
  return "train --model tiny --threads 1 --warmup-steps 2 --log-every 1000 --data " + data + " ";
}

// Every (epoch, row) trained, in order, from a --log-sample-ids file's lines [first, last).
std::vector<std::pair<int64_t, int64_t>> samples(const std::vector<nlohmann::json>& lines,
                                                 size_t first = 0, size_t last = SIZE_MAX) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (size_t i = first; i < lines.size() && i < last; ++i)
    for (const auto& r : lines[i]["rows"])
      out.emplace_back(lines[i]["epoch"].get<int64_t>(), r.get<int64_t>());
  return out;
}

struct Whole {
  std::string dir;
  std::vector<nlohmann::json> metrics, ids;
};

// An uninterrupted run that checkpoints every `every` steps.
Whole whole_run(const std::string& name, int np, const std::string& flags, int every) {
  Whole w;
  w.dir = tmp(name);
  std::filesystem::remove_all(w.dir);
  const auto metrics = tmp(name + ".jsonl"), ids = tmp(name + "_ids.jsonl");
  std::filesystem::remove(metrics);
  std::filesystem::remove(ids);
  const auto r =
      run(flags + "--checkpoint-dir " + w.dir + " --save-every " + std::to_string(every) +
              " --metrics-file " + metrics + " --log-sample-ids " + ids,
          mpirun(np));
  EXPECT_EQ(r.code, 0) << r.out;
  w.metrics = read_jsonl(metrics);
  w.ids = read_jsonl(ids);
  return w;
}

// The run resumed from the checkpoint of step `at` with other flags; its metrics and sample ids.
std::pair<std::vector<nlohmann::json>, std::vector<nlohmann::json>> resumed_run(
    const std::string& name, const Whole& w, int at, int np, const std::string& flags) {
  const auto metrics = tmp(name + ".jsonl"), ids = tmp(name + "_ids.jsonl");
  std::filesystem::remove(metrics);
  std::filesystem::remove(ids);
  const auto dir = tmp(name);
  std::filesystem::remove_all(dir);
  char ckpt[32];
  std::snprintf(ckpt, sizeof ckpt, "/step-%08d.h5", at);
  const auto r = run(flags + "--checkpoint-dir " + dir + " --resume " + w.dir + ckpt +
                         " --metrics-file " + metrics + " --log-sample-ids " + ids,
                     mpirun(np));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("resumed from"), std::string::npos) << r.out;
  return {read_jsonl(metrics), read_jsonl(ids)};
}

// The interrupted run's samples (the whole run's first `at` steps, then the resumed run's) are
// the uninterrupted run's, in order; and the learning rate is a function of progress: a resumed
// step that starts where a whole-run step started (in rows of the epoch) has that step's rate.
void expect_same_training(const Whole& w, int at, const std::vector<nlohmann::json>& metrics,
                          const std::vector<nlohmann::json>& ids, const std::string& what) {
  auto joined = samples(w.ids, 0, static_cast<size_t>(at));
  const auto rest = samples(ids);
  joined.insert(joined.end(), rest.begin(), rest.end());
  EXPECT_EQ(joined, samples(w.ids))
      << what << ": the samples trained differ from the uninterrupted run's";
  ASSERT_FALSE(metrics.empty()) << what;
  ASSERT_EQ(metrics.size(), ids.size()) << what;
  EXPECT_EQ(metrics.front()["step"].get<int64_t>(), at + 1) << what;
  const int64_t ref =
      static_cast<int64_t>(w.ids.front()["rows"].size());  // the whole run's global batch
  int64_t epoch_steps = 0;
  for (const auto& l : w.ids) epoch_steps += l["epoch"] == 0;
  std::vector<nlohmann::json> lines(w.ids.begin(), w.ids.begin() + at);
  lines.insert(lines.end(), ids.begin(), ids.end());
  int64_t epoch = -1, in_epoch = 0, compared = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i]["epoch"] != epoch) {
      epoch = lines[i]["epoch"];
      in_epoch = 0;
    }
    const int64_t progress = epoch * epoch_steps * ref + in_epoch;  // before this step, in rows
    in_epoch += static_cast<int64_t>(lines[i]["rows"].size());
    if (i < static_cast<size_t>(at) || progress % ref != 0) continue;
    const size_t j = static_cast<size_t>(progress / ref);
    ASSERT_LT(j, w.metrics.size()) << what;
    EXPECT_NEAR(metrics[i - at]["lr"].get<double>(), w.metrics[j]["lr"].get<double>(), 1e-12)
        << what << ": step " << i + 1 << " starts where the whole run's step " << j + 1 << " did";
    ++compared;
  }
  EXPECT_GE(compared, 2) << what;
}

// Two runs' losses step by step from `first` on (b's from its start), within rel of a's.
void expect_losses(const std::vector<nlohmann::json>& a, const std::vector<nlohmann::json>& b,
                   size_t first, double rel, const std::string& what) {
  ASSERT_EQ(b.size() + first, a.size()) << what;
  for (size_t i = 0; i < b.size(); ++i) {
    const double want = a[i + first]["loss"], got = b[i]["loss"];
    EXPECT_NEAR(got, want, rel * want) << what << ": step " << i + first + 1;
  }
}

}  // namespace

// 50 rows, 2 epochs: 12-row global batches give 5 steps an epoch, 6-row ones 9, 24-row ones 3.
TEST(ResumeLayouts, FourToTwoRanksTwoToFourAndAnotherGradAccumTrainTheSameSamples) {
  const std::string t = train_on(small_file(50)) + "--epochs 2 --batch-size 3 ";
  const Whole four = whole_run("resume_four", 4, t, 3);
  ASSERT_EQ(four.metrics.size(), 10u);
  ASSERT_EQ(samples(four.ids).size(), 100u) << "two epochs of 50 rows";
  const auto [m42, ids42] =
      resumed_run("resume_4to2", four, 3, 2, t);  // global batch 12 -> 6, mid-epoch 0
  EXPECT_EQ(m42.size(), 12u) << "epoch 0's last 14 rows and epoch 1 in 6-row batches: 3 + 9 steps";
  expect_same_training(four, 3, m42, ids42, "4 -> 2 ranks");
  const auto [m44, ids44] =
      resumed_run("resume_accum", four, 6, 4, t + "--grad-accum 2 ");  // 12 -> 24, in epoch 1
  expect_same_training(four, 6, m44, ids44, "--grad-accum 1 -> 2");

  const Whole two = whole_run("resume_two", 2, t, 4);
  ASSERT_EQ(two.metrics.size(), 18u);
  const auto [m24, ids24] = resumed_run("resume_2to4", two, 4, 4, t);  // 6 -> 12
  expect_same_training(two, 4, m24, ids24, "2 -> 4 ranks");
  const auto [m24b, ids24b] = resumed_run("resume_2to4_epoch1", two, 12, 4, t);  // in epoch 1
  expect_same_training(two, 12, m24b, ids24b, "2 -> 4 ranks in the second epoch");
}

// The global batch held (4 ranks x 3 rows -> 2 ranks x 6 rows): the losses too, with LoRA dropout.
TEST(ResumeLayouts, HoldingTheGlobalBatchGivesTheUninterruptedLossesWithLoraDropout) {
  const std::string t =
      train_on(small_file(50)) + "--epochs 2 --lora-rank 4 --lora-dropout 0.3 --lr 1e-2 ";
  const Whole four = whole_run("resume_lora_four", 4, t + "--batch-size 3 ", 3);
  ASSERT_EQ(four.metrics.size(), 10u);
  const auto [m, ids] = resumed_run("resume_lora_2", four, 3, 2, t + "--batch-size 6 ");
  expect_same_training(four, 3, m, ids, "LoRA 4 -> 2 ranks");
  ASSERT_EQ(m.size(), 7u);
  for (size_t i = 0; i < m.size(); ++i) {
    const double a = four.metrics[i + 3]["loss"], b = m[i]["loss"];
    EXPECT_NEAR(b, a, 1e-6 * a) << "step " << i + 4;
  }
  // One rank and four ranks at the same global batch draw the same masks: the same losses.
  const auto one = tmp("resume_lora_one.jsonl");
  std::filesystem::remove(one);
  const auto r = run(t + "--batch-size 12 --metrics-file " + one, mpirun(1));
  ASSERT_EQ(r.code, 0) << r.out;
  const auto single = read_jsonl(one);
  ASSERT_EQ(single.size(), four.metrics.size());
  for (size_t i = 0; i < single.size(); ++i) {
    const double a = single[i]["loss"], b = four.metrics[i]["loss"];
    EXPECT_NEAR(b, a, 1e-5 * a) << "step " << i + 1 << ": 4 ranks against 1 with dropout 0.3";
  }
  // Dropout is on: without it the losses differ.
  const auto none = tmp("resume_lora_nodrop.jsonl");
  std::filesystem::remove(none);
  const auto n = run(train_on(small_file(50)) +
                         "--epochs 2 --lora-rank 4 --lora-dropout 0 --lr 1e-2 --batch-size 12 "
                         "--metrics-file " +
                         none,
                     mpirun(1));
  ASSERT_EQ(n.code, 0) << n.out;
  EXPECT_NE(read_jsonl(none).back()["loss"].get<double>(), single.back()["loss"].get<double>());
}

// --cpu-offload changes where the state lives, not the training: a run with it equals one without
// (the CPU path is exact), and its checkpoints resume without it at another layout and back.
TEST(ResumeLayouts, CpuOffloadResumesWithAndWithoutItAtAnotherLayout) {
  const std::string t = train_on(small_file(50)) + "--epochs 2 --lr 1e-2 ";
  const Whole plain = whole_run("resume_plain_four", 4, t + "--batch-size 3 ", 3);
  const Whole off = whole_run("resume_offload_four", 4, t + "--batch-size 3 --cpu-offload ", 3);
  ASSERT_EQ(off.metrics.size(), 10u);
  expect_losses(plain.metrics, off.metrics, 0, 1e-6, "with and without --cpu-offload");
  const auto [m3, ids3] = resumed_run("resume_offload_to_2", off, 3, 2, t + "--batch-size 6 ");
  expect_same_training(off, 3, m3, ids3, "--cpu-offload 4 ranks -> 2 ranks without");
  const auto [m6, ids6] =
      resumed_run("resume_plain_to_3_offload", plain, 6, 3, t + "--batch-size 4 --cpu-offload ");
  expect_same_training(plain, 6, m6, ids6, "4 ranks without -> 3 ranks with --cpu-offload");
  expect_losses(off.metrics, m3, 3, 1e-5, "resumed without offload");
  expect_losses(plain.metrics, m6, 6, 1e-5, "resumed with offload");
}

// --context-parallel: 4 ranks in groups of 2 (3 rows per group) train what 2 ranks without it
// train (3 rows per rank): the same samples and losses; the checkpoint resumes at 3 ranks without
// context parallelism and at 4 ranks in one group of 4, and a plain one at 2 ranks with groups
// of 2 (one data-parallel group of 6 rows), each on the uninterrupted run's samples and losses.
TEST(ResumeLayouts, ContextParallelResumesAtAnotherContextSize) {
  const std::string t = train_on(small_file(50)) + "--epochs 2 --lr 1e-2 ";
  const Whole plain = whole_run("resume_cp1_two", 2, t + "--batch-size 3 ", 3);
  const Whole cp = whole_run("resume_cp2_four", 4, t + "--batch-size 3 --context-parallel 2 ", 3);
  ASSERT_EQ(cp.metrics.size(), 18u);  // 6-row global batches: 9 steps an epoch
  EXPECT_EQ(samples(cp.ids), samples(plain.ids));
  expect_losses(plain.metrics, cp.metrics, 0, 1e-5, "with and without --context-parallel 2");
  const auto [m3, ids3] = resumed_run("resume_cp2_to_3", cp, 3, 3, t + "--batch-size 2 ");
  expect_same_training(cp, 3, m3, ids3, "--context-parallel 2 at 4 ranks -> 3 ranks without");
  expect_losses(cp.metrics, m3, 3, 1e-5, "--context-parallel 2 -> none");
  const auto [m4, ids4] =
      resumed_run("resume_cp2_to_cp4", cp, 6, 4, t + "--batch-size 6 --context-parallel 4 ");
  expect_same_training(cp, 6, m4, ids4, "--context-parallel 2 -> 4");
  expect_losses(cp.metrics, m4, 6, 1e-5, "--context-parallel 2 -> 4");
  const auto [m2, ids2] =
      resumed_run("resume_cp1_to_cp2", plain, 3, 2, t + "--batch-size 6 --context-parallel 2 ");
  expect_same_training(plain, 3, m2, ids2, "2 ranks without -> --context-parallel 2");
  expect_losses(plain.metrics, m2, 3, 1e-5, "none -> --context-parallel 2");
}

// Another seed or another token file under a checkpoint is refused, naming both; allowed, it
// continues from the same row.
TEST(ResumeLayouts, AnotherSeedOrTokenFileIsRefusedUnlessAllowed) {
  const std::string t = train_on(small_file(50)) + "--steps 6 --batch-size 3 ";
  const Whole w = whole_run("resume_identity", 2, t, 3);
  ASSERT_EQ(w.metrics.size(), 6u);
  const std::string ckpt = w.dir + "/step-00000003.h5";
  const auto seed = run(t + "--seed 99 --resume " + ckpt, mpirun(2));
  EXPECT_EQ(seed.code, 2) << seed.out;
  EXPECT_NE(seed.out.find("shardtrain: error: --resume: " + ckpt +
                          " was trained with --seed 1234 (this run: 99)"),
            std::string::npos)
      << seed.out;
  const std::string other = train_on(small_file(40)) + "--steps 6 --batch-size 3 ";
  const auto file = run(other + "--resume " + ckpt, mpirun(2));
  EXPECT_EQ(file.code, 2) << file.out;
  EXPECT_NE(file.out.find("another token file (50 rows"), std::string::npos) << file.out;
  EXPECT_NE(file.out.find("this run's --data: 40 rows"), std::string::npos) << file.out;
  EXPECT_NE(file.out.find("--allow-data-change"), std::string::npos) << file.out;
  const auto allowed = run(other + "--allow-data-change --resume " + ckpt, mpirun(2));
  EXPECT_EQ(allowed.code, 0) << allowed.out;
  EXPECT_NE(
      allowed.out.find("--allow-data-change: " + ckpt + " was trained with another token file"),
      std::string::npos)
      << allowed.out;
}
