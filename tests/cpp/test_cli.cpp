// The shardtrain binary as a user runs it: exit codes, messages and the training outcome.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "run_binary.h"
#include "shardtrain/runtime/version.h"

namespace fs = std::filesystem;

using namespace testing_support;

namespace {
const std::string kDemo = std::string(SHARDTRAIN_TEST_TMP) + "/demo";
const std::string kData = " --data " + kDemo + "/train.h5 --val-data " + kDemo + "/train.val.h5 ";
const std::string kTok = source("data/demo/tokenizer.model");


void expect_usage_error(const std::string& args, const std::string& option) {
  auto r = run(args);
  EXPECT_EQ(r.code, 2) << args << "\n" << r.out;
  EXPECT_NE(r.out.find(option), std::string::npos) << "message should name " << option << ":\n" << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << "one line:\n" << r.out;
}
}  // namespace

TEST(Cli, UnknownPreset) { expect_usage_error("train --model llama2-8b", "--model"); }
TEST(Cli, BadObservabilityOptions) {
  expect_usage_error("train --model tiny --metrics-port 70000", "--metrics-port");
  expect_usage_error("train --model tiny --metrics-port 9464 --metrics-bind localhost", "--metrics-bind 'localhost'");
  expect_usage_error("train --model tiny --metrics-port 9464 --metrics-bind 10.0.0.300", "--metrics-bind '10.0.0.300'");
  expect_usage_error("train --model tiny --collective-timeout -5", "--collective-timeout");
  expect_usage_error("train --model tiny --collective-dump 0", "--collective-dump");
  expect_usage_error("train --model tiny --debug-sleep 1:two:3", "--debug-sleep");
}
TEST(Cli, NegativeLr) { expect_usage_error("train --model tiny --lr -1", "--lr"); }
TEST(Cli, HeadsThatDoNotDivideWidth) { expect_usage_error("train --model tiny --n-heads 5", "--n-heads"); }
TEST(Cli, HeadsNotMultipleOfKvHeads) { expect_usage_error("train --model tiny --n-kv-heads 3", "--n-kv-heads"); }
TEST(Cli, MissingFiles) {
  expect_usage_error("train --model tiny --data /nonexistent/train.h5", "--data");
  expect_usage_error("train --model tiny", "--data");
  expect_usage_error("train --model tiny --data " + kTok, "not an HDF5 file");
  expect_usage_error("eval --model tiny", "--accuracy-file");
  expect_usage_error("eval --model tiny --accuracy-file " + source("data/demo/val.jsonl"), "--tokenizer");
  expect_usage_error("generate --model tiny --tokenizer " + kTok, "--prompt");
  expect_usage_error("train --model tiny --weights /nonexistent/model.safetensors", "--weights");
  expect_usage_error("eval --model /nonexistent/config.json", "--model");
  expect_usage_error("train --config /nonexistent/run.cfg", "--config");
  // A name longer than NAME_MAX (found by fuzz_options): std::filesystem's throwing forms escaped.
  const std::string longname = "/tmp/" + std::string(300, 'x');
  expect_usage_error("eval --model " + longname + "/config.json", "--model");
  expect_usage_error("train --model tiny --weights " + longname, "--weights");
  expect_usage_error("train --model tiny --data " + longname, "--data");
}
// Sizes beyond int64 (found by fuzz_options: the cast was undefined behaviour) and NaN.
TEST(Cli, PreflightSizesOutOfRangeExit2) {
  expect_usage_error("preflight --min-bytes 6" + std::string(40, '0'), "--min-bytes");
  expect_usage_error("preflight --max-bytes inf", "--max-bytes");
  expect_usage_error("preflight --max-bytes nan", "--max-bytes");
}
TEST(Cli, UnknownOptionAndBadNumber) {
  expect_usage_error("train --model tiny --learning-rate 3", "learning-rate");
  expect_usage_error("train --model tiny --steps many", "--steps");
}
TEST(Cli, BadHuggingFaceConfig) {
  const auto p = tmp("bad_config.json");
  std::ofstream(p) << R"({"model_type":"llama","vocab_size":512,"hidden_size":64,"intermediate_size":128,)"
                   << R"("num_hidden_layers":2,"num_attention_heads":6,"num_key_value_heads":2})";
  expect_usage_error("train --model " + p, "num_attention_heads");
}
TEST(Cli, ConfigFileValuesAreValidatedToo) {
  const auto p = tmp("run.cfg");
  std::ofstream(p) << "model = tiny\nlr = -0.5\n";
  expect_usage_error("train --config " + p, "--lr");
}
// Boost.Program_options' own error message loops forever on these (found by tests/fuzz/fuzz_options).
TEST(Cli, PercentPlaceholdersInOptionsExit2) {
  expect_usage_error("train --model tiny --steps %value%", "'--steps'");
  expect_usage_error("prepare --%canonical_option%mode x", "%...%");
  const auto p = tmp("placeholder.cfg");
  std::ofstream(p) << "model = tiny\nsteps = %value%\n";
  expect_usage_error("train --config " + p, "steps");
}
TEST(Cli, HelpForEachCommand) {
  for (const char* c : {"train", "eval", "generate"}) {
    auto r = run(std::string(c) + " --help");
    EXPECT_EQ(r.code, 0);
    EXPECT_NE(r.out.find("--model"), std::string::npos);
  }
  EXPECT_NE(run("train --help").out.find("--grad-accum"), std::string::npos);
  EXPECT_NE(run("prepare --help").out.find("--val-fraction"), std::string::npos);
  EXPECT_EQ(run("frobnicate").code, 2);
}

// Groups hold what their titles say; fault injection is only in --help-all; eval and generate
// take the sharding options.
TEST(Cli, HelpGroupsAndTheHiddenFaultInjection) {
  const std::string help = run("train --help").out, all = run("train --help-all").out;
  const auto checkpoints = help.find("Checkpoints:");
  ASSERT_NE(checkpoints, std::string::npos) << help;
  const auto next_group = help.find(":\n", checkpoints + 13);
  for (const char* opt : {"--checkpoint-dir", "--save-every", "--resume", "--async-save"}) {
    const auto at = help.find(opt);
    EXPECT_GT(at, checkpoints) << opt;
    EXPECT_LT(at, next_group) << opt << " is outside the Checkpoints group";
  }
  const auto run_control = help.find("Signals and non-finite losses");
  ASSERT_NE(run_control, std::string::npos) << help;
  for (const char* opt : {"--on-signal", "--on-nonfinite", "--max-nonfinite-steps"}) EXPECT_GT(help.find(opt), run_control) << opt;
  EXPECT_EQ(help.find("--fail-on-rank"), std::string::npos);
  EXPECT_EQ(help.find("--debug-sleep"), std::string::npos);
  EXPECT_EQ(help.find("--debug-nan"), std::string::npos);
  EXPECT_NE(all.find("Fault injection"), std::string::npos) << all;
  EXPECT_NE(all.find("--fail-on-rank"), std::string::npos);
  EXPECT_NE(help.find("--param-dtype arg (=auto)"), std::string::npos) << help;
  EXPECT_NE(help.find("--no-tf32"), std::string::npos) << help;
  for (const char* c : {"eval", "generate"}) {
    const std::string h = run(std::string(c) + " --help").out;
    EXPECT_NE(h.find("--sharding"), std::string::npos) << c;
    EXPECT_NE(h.find("--device"), std::string::npos) << c;
  }
  EXPECT_EQ(run("--version").out, "shardtrain " + std::string(SHARDTRAIN_VERSION) + "\n");
}

// The tiny model on the shipped demo data must at least halve its loss in 200 steps.
TEST(Cli, TrainingHalvesTheLossAndEvalReadsTheResult) {
  const auto metrics = tmp("metrics.jsonl"), out = tmp("trained");
  fs::remove_all(out);
  auto r = run("train --model tiny --steps 200 --lr 3e-3 --threads 2 --log-every 50 --val-batches 0 --metrics-file " + metrics +
               kData + " --save-model " + out);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("step 200/200"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("val_loss"), std::string::npos) << r.out;
  const auto rows = read_jsonl(metrics);
  ASSERT_EQ(rows.size(), 200u);
  for (const char* k : {"step", "loss", "lr", "grad_norm", "tokens_per_s", "tflops_per_device", "mfu",
                        "step_time_s", "peak_mem_bytes"})
    ASSERT_TRUE(rows.back().contains(k)) << k;
  const double first = rows.front()["loss"], last = rows.back()["loss"];
  EXPECT_LT(last, 0.5 * first) << "initial " << first << ", final " << last;
  EXPECT_GT(rows.back()["tokens_per_s"].get<double>(), 0);
  EXPECT_GT(rows.back()["peak_mem_bytes"].get<int64_t>(), 0);

  auto e = run("eval --model " + out + "/config.json --weights " + out + " --threads 2 --data " + kDemo + "/train.val.h5");
  ASSERT_EQ(e.code, 0) << e.out;
  const auto brace = e.out.find("\n{") + 1;
  auto j = nlohmann::json::parse(e.out.substr(brace, e.out.find('\n', brace) - brace));
  EXPECT_NE(e.out.find("loaded"), std::string::npos);
  EXPECT_NEAR(j["loss"].get<double>(), rows.back()["val_loss"].get<double>(), 1e-4) << "eval sees the trained weights";
  EXPECT_NEAR(j["perplexity"].get<double>(), std::exp(j["loss"].get<double>()), 1e-6 * j["perplexity"].get<double>());
}

// Exact-match accuracy, measured by generation, climbs from ~0 during training, and eval and
// generate reproduce it from the saved model.
TEST(Cli, ExactMatchClimbsAndEvalAndGenerateAgree) {
  const auto metrics = tmp("acc_metrics.jsonl"), out = tmp("acc_model");
  fs::remove_all(out);
  const std::string acc = " --accuracy-file " + source("data/demo/val.jsonl") + " --tokenizer " + kTok +
                          " --accuracy-samples 50 --max-new-tokens 12 ";
  auto r = run("train --model tiny --steps 800 --batch-size 32 --lr 4e-3 --warmup-steps 40 --threads 2 --val-every 800 "
               "--log-every 400 --metrics-file " + metrics + kData + acc + " --save-model " + out);
  ASSERT_EQ(r.code, 0) << r.out;
  const auto rows = read_jsonl(metrics);
  ASSERT_EQ(rows.front()["step"], 0);
  const double before = rows.front()["val_exact_match"], after = rows.back()["val_exact_match"];
  EXPECT_LE(before, 0.05);
  EXPECT_GE(after, 0.2) << r.out;
  auto e = run("eval --model " + out + " --weights " + out + " --threads 2" + acc);
  ASSERT_EQ(e.code, 0) << e.out;
  const auto brace = e.out.find("\n{") + 1;
  auto j = nlohmann::json::parse(e.out.substr(brace, e.out.find('\n', brace) - brace));
  EXPECT_NEAR(j["exact_match"].get<double>(), after, 1e-9);
  EXPECT_EQ(j["total"], 50);

  const std::string gen = "generate --model " + out + " --weights " + out + " --tokenizer " + kTok +
                          " --template alpaca --prompt 'Reverse the digits.' --input '1 2 3 4' --max-new-tokens 12";
  auto g = run(gen);
  ASSERT_EQ(g.code, 0) << g.out;
  EXPECT_NE(g.out.find_first_of("0123456789"), std::string::npos) << g.out;
  auto s1 = run(gen + " --temperature 1.0 --top-p 0.9 --seed 5"), s2 = run(gen + " --temperature 1.0 --top-p 0.9 --seed 5");
  ASSERT_EQ(s1.code, 0) << s1.out;
  auto last_line = [](const std::string& o) { return o.substr(o.rfind('\n', o.size() - 2) + 1); };
  EXPECT_EQ(last_line(s1.out), last_line(s2.out)) << "sampling is reproducible from --seed";
}

// --profile-step: LibTorch's profiler around one step; its Chrome trace holds the ops and the
// optimizer's range, and the summary attributes the matmuls to GEMM.
TEST(Cli, ProfileStepWritesTraceAndSummary) {
  expect_usage_error("train --model tiny --steps 3 --profile-step 4" + kData, "--profile-step");
  const auto dir = tmp("profile");
  fs::remove_all(dir);
  auto r = run("train --model tiny --steps 3 --threads 2 --val-batches 0 --profile-step 2 --profile-dir " + dir + kData);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.find("gpuGetDeviceCount"), std::string::npos) << "Kineto's GPU probe stays quiet on CPU:\n" << r.out;
  std::ifstream in(dir + "/trace-rank0.json");
  ASSERT_TRUE(in) << r.out;
  const auto trace = nlohmann::json::parse(in);
  std::map<std::string, int> names;
  for (const auto& e : trace["traceEvents"])
    if (e.contains("name") && e.contains("cat")) names[e["cat"].get<std::string>() + "/" + e["name"].get<std::string>()]++;
  EXPECT_EQ(names["user_annotation/shardtrain::optimizer"], 1);
  EXPECT_GT(names["cpu_op/aten::mm"], 10) << "4 linears per layer forward, two matmuls each backward";
  const std::string md = slurp(dir + "/profile-rank0.md");
  EXPECT_NE(md.find("Profile of step 2 (CPU, rank 0)"), std::string::npos) << md;
  EXPECT_NE(md.find("`aten::mm` | GEMM"), std::string::npos) << md;
  double total = 0;
  for (const char* row : {"| GEMM | ", "| attention | ", "| elementwise and other | ", "| optimizer | ",
                          "| communication | ", "| memory copies | ", "| gaps (host overhead between ops) | "}) {
    const auto at = md.find(row);
    ASSERT_NE(at, std::string::npos) << row << "\n" << md;
    const double pct = std::stod(md.substr(at + std::string(row).size()));
    EXPECT_GE(pct, 0) << row;
    total += pct;
  }
  EXPECT_NEAR(total, 100.0, 0.5) << "one thread: the kinds and the gaps tile the step\n" << md;
  EXPECT_NE(r.out.find("profile of step 2"), std::string::npos) << r.out;
}
