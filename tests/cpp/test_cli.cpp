// The shardtrain binary as a user runs it: exit codes, messages and the training outcome.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace fs = std::filesystem;

namespace {
struct Result {
  int code = -1;
  std::string out;  // stdout and stderr
};

Result run(const std::string& args) {
  const std::string cmd = std::string(SHARDTRAIN_BIN) + " " + args + " 2>&1";
  Result r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

std::string tmp(const std::string& name) {
  fs::create_directories(SHARDTRAIN_TEST_TMP);
  return std::string(SHARDTRAIN_TEST_TMP) + "/" + name;
}

void expect_usage_error(const std::string& args, const std::string& option) {
  auto r = run(args);
  EXPECT_EQ(r.code, 2) << args << "\n" << r.out;
  EXPECT_NE(r.out.find(option), std::string::npos) << "message should name " << option << ":\n" << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << "one line:\n" << r.out;
}
}  // namespace

TEST(Cli, UnknownPreset) { expect_usage_error("train --model llama2-8b", "--model"); }
TEST(Cli, NegativeLr) { expect_usage_error("train --model tiny --lr -1", "--lr"); }
TEST(Cli, HeadsThatDoNotDivideWidth) { expect_usage_error("train --model tiny --n-heads 5", "--n-heads"); }
TEST(Cli, HeadsNotMultipleOfKvHeads) { expect_usage_error("train --model tiny --n-kv-heads 3", "--n-kv-heads"); }
TEST(Cli, MissingFiles) {
  expect_usage_error("train --model tiny --data /nonexistent/train.bin", "--data");
  expect_usage_error("train --model tiny --weights /nonexistent/model.safetensors", "--weights");
  expect_usage_error("eval --model /nonexistent/config.json", "--model");
  expect_usage_error("train --config /nonexistent/run.cfg", "--config");
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
TEST(Cli, HelpForEachCommand) {
  for (const char* c : {"train", "eval"}) {
    auto r = run(std::string(c) + " --help");
    EXPECT_EQ(r.code, 0);
    EXPECT_NE(r.out.find("--model"), std::string::npos);
  }
  EXPECT_NE(run("train --help").out.find("--grad-accum"), std::string::npos);
  EXPECT_EQ(run("frobnicate").code, 2);
}

// A tiny model on a small repeated corpus must at least halve its loss in 200 steps.
TEST(Cli, TrainingHalvesTheLossAndEvalReadsTheResult) {
  const auto metrics = tmp("metrics.jsonl"), out = tmp("trained");
  fs::remove_all(out);
  auto r = run("train --model tiny --steps 200 --lr 3e-3 --threads 2 --log-every 50 --metrics-file " + metrics +
               " --save-model " + out);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("step 200/200"), std::string::npos) << r.out;
  std::ifstream in(metrics);
  std::string line;
  std::vector<nlohmann::json> rows;
  while (std::getline(in, line)) rows.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(rows.size(), 200u);
  for (const char* k : {"step", "loss", "lr", "grad_norm", "tokens_per_s", "tflops_per_device", "mfu",
                        "step_time_s", "peak_mem_bytes"})
    ASSERT_TRUE(rows.back().contains(k)) << k;
  const double first = rows.front()["loss"], last = rows.back()["loss"];
  EXPECT_LT(last, 0.5 * first) << "initial " << first << ", final " << last;
  EXPECT_GT(rows.back()["tokens_per_s"].get<double>(), 0);
  EXPECT_GT(rows.back()["peak_mem_bytes"].get<int64_t>(), 0);

  auto e = run("eval --model " + out + "/config.json --weights " + out + " --threads 2");
  ASSERT_EQ(e.code, 0) << e.out;
  const auto brace = e.out.find("\n{") + 1;
  auto j = nlohmann::json::parse(e.out.substr(brace, e.out.find('\n', brace) - brace));
  EXPECT_NE(e.out.find("loaded"), std::string::npos);
  EXPECT_LT(j["loss"].get<double>(), first) << "the saved weights are the trained ones";
  EXPECT_NEAR(j["perplexity"].get<double>(), std::exp(j["loss"].get<double>()), 1e-6 * j["perplexity"].get<double>());
}

TEST(Cli, DefaultRunNeedsNoArguments) {
  auto r = run("train --model tiny");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("val_loss"), std::string::npos) << r.out;
}
