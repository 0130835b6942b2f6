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
#include <regex>
#include <string>

#include "one_line_errors.h"
#include "parser_refusal.h"
#include "run_binary.h"
#include "shardtrain/cli/banner.h"
#include "shardtrain/model/generate.h"
#include "shardtrain/model/params.h"
#include "shardtrain/report/run_report.h"
#include "shardtrain/runtime/version.h"
#include "shardtrain/train/metrics.h"

namespace fs = std::filesystem;

using namespace shardtrain;
using namespace testing_support;

namespace {
const std::string kDemo = std::string(SHARDTRAIN_TEST_TMP) + "/demo";
const std::string kData = " --data " + kDemo + "/train.h5 --val-data " + kDemo + "/train.val.h5 ";
const std::string kTok = source("data/demo/tokenizer.model");

}  // namespace

// The parsers' refusals, checked in this process by expect_usage_error, reach the user through
// main as the same message on one line, exit 2: an unknown option, a bad value, a bad value in a
// --config file, for the commands that start MPI and for plan, which does not.
TEST(Cli, ParserRefusalsReachTheUserAsOneLineAndExit2) {
  const auto cfg = tmp("refused.cfg");
  std::ofstream(cfg) << "model = tiny\nlr = -0.5\n";
  for (const std::string& line :
       std::vector<std::string>{"train --model tiny --lrr 3", "train --config " + cfg,
                                "prepare --seq 64", "plan --model tiny --seq-len 0"}) {
    const auto said = parser_refusal(line);
    ASSERT_TRUE(said.has_value()) << line << ": the parser accepts it";
    const Result r = run(line);
    expect_one_line_exit2(r, *said);
    EXPECT_EQ(r.out, "shardtrain: error: " + *said + "\n") << line;
  }
}

TEST(Cli, UnknownPreset) { expect_usage_error("train --model llama2-8b", "--model"); }
TEST(Cli, BadObservabilityOptions) {
  expect_usage_error("train --model tiny --metrics-port 70000", "--metrics-port");
  expect_usage_error("train --model tiny --metrics-port 9464 --metrics-bind localhost",
                     "--metrics-bind 'localhost'");
  expect_usage_error("train --model tiny --metrics-port 9464 --metrics-bind 10.0.0.300",
                     "--metrics-bind '10.0.0.300'");
  expect_usage_error("train --model tiny --collective-timeout -5", "--collective-timeout");
  expect_usage_error("train --model tiny --collective-dump 0", "--collective-dump");
  expect_usage_error("train --model tiny --debug-sleep 1:two:3", "--debug-sleep");
}
// --fp8 where it cannot run: a bad mode, the CPU (no float8 tensor cores; at 2 ranks too, every
// rank agreeing), and a model whose projections are not multiples of 16.
TEST(Cli, Fp8IsRefusedByNameWhereItCannotRun) {
  expect_usage_error("train --model tiny --fp8 e4m3", "--fp8 must be off, tensorwise or rowwise");
  const std::string t = "train --model tiny --threads 1 --steps 1 --device cpu" + kData;
  expect_usage_error(
      t + "--fp8 tensorwise",
      "--fp8 tensorwise: the CPU has no float8 tensor cores (compute capability 8.9 or "
      "newer: L40S, H100, H200); or run without --fp8");
  const Result two = run(t + "--fp8 rowwise", std::string(SHARDTRAIN_MPIEXEC) + "2 ");
  expect_one_line_exit2(two, "--fp8 rowwise: the CPU has no float8 tensor cores");
  expect_usage_error(t + "--fp8 rowwise --intermediate-size 180",
                     "--fp8 rowwise: gate_proj is [180, 64]: float8 GEMMs need both dimensions in "
                     "multiples of 16");
}
// --context-parallel: a size that does not divide the ranks per node is one line and exit 2 on
// every rank, generate refuses it, and eval in groups of 2 gives the loss eval gives without.
TEST(Cli, ContextParallelIsRefusedWhereItCannotSplitAndEvalAgrees) {
  const std::string t = "train --model tiny --threads 1 --steps 1 --device cpu" + kData;
  expect_usage_error(t + "--context-parallel 0", "--context-parallel must be 1 or more");
  const std::string two = std::string(SHARDTRAIN_MPIEXEC) + "2 ";
  expect_one_line_exit2(run(t + "--context-parallel 3", two),
                        "--context-parallel 3 must divide the ranks per node (2 here)");
  expect_one_line_exit2(run(t + "--context-parallel 2 --ranks-per-node 1", two),
                        "--context-parallel 2 must divide the ranks per node (1 here)");
  const std::string model = tmp("cp_eval_model");
  std::filesystem::remove_all(model);
  ASSERT_EQ(run("train --model tiny --threads 1 --steps 2 --save-model " + model + kData).code, 0);
  expect_usage_error(
      "generate --weights " + model + " --tokenizer " + kTok + " --prompt hi --context-parallel 2",
      "--context-parallel applies to train and eval");
  const std::string eval = "eval --threads 1 --weights " + model + " --data " + kDemo +
                           "/train.val.h5 --batch-size 4 --max-batches 3 ";
  const Result whole = run(eval, two), split = run(eval + "--context-parallel 2", two);
  ASSERT_EQ(whole.code, 0) << whole.out;
  ASSERT_EQ(split.code, 0) << split.out;
  const auto loss = [](const std::string& out) {
    return nlohmann::json::parse(
               out.substr(out.find('{'), out.find('\n', out.find('{')) - out.find('{')))["loss"]
        .get<double>();
  };
  EXPECT_NEAR(loss(split.out), loss(whole.out), 1e-5 * loss(whole.out)) << split.out;
}
TEST(Cli, NegativeLr) { expect_usage_error("train --model tiny --lr -1", "--lr"); }
TEST(Cli, HeadsThatDoNotDivideWidth) {
  expect_usage_error("train --model tiny --n-heads 5", "--n-heads");
}
TEST(Cli, HeadsNotMultipleOfKvHeads) {
  expect_usage_error("train --model tiny --n-kv-heads 3", "--n-kv-heads");
}
TEST(Cli, MissingFiles) {
  expect_usage_error("train --model tiny --data /nonexistent/train.h5", "--data");
  expect_usage_error("train --model tiny", "--data");
  expect_usage_error("train --model tiny --data " + kTok, "not an HDF5 file");
  // A random model's loss or text is never what a user wants: eval and generate need --weights.
  expect_usage_error("eval --model tiny --data " + kDemo + "/train.h5", "eval needs --weights");
  expect_usage_error("generate --model tiny --tokenizer " + kTok + " --prompt hi",
                     "generate needs --weights");
  expect_usage_error("eval --model tiny --weights " + kDemo, "--accuracy-file");
  expect_usage_error(
      "eval --model tiny --weights " + kDemo + " --accuracy-file " + source("data/demo/val.jsonl"),
      "--tokenizer");
  expect_usage_error("generate --model tiny --weights " + kDemo + " --tokenizer " + kTok,
                     "--prompt");
  expect_usage_error("train --model tiny --weights /nonexistent/model.safetensors", "--weights");
  expect_usage_error("train --weights /nonexistent/Llama-3.1-8B --data " + kDemo + "/train.h5",
                     "--weights /nonexistent/Llama-3.1-8B does not exist");
  expect_usage_error("eval --model /nonexistent/config.json", "--model");
  expect_usage_error("train --config /nonexistent/run.cfg", "--config");
  // A name longer than NAME_MAX (found by fuzz_options): std::filesystem's throwing forms escaped.
  const std::string longname = "/tmp/" + std::string(300, 'x');
  expect_usage_error("eval --model " + longname + "/config.json", "--model");
  expect_usage_error("train --model tiny --weights " + longname, "--weights");
  expect_usage_error("train --model tiny --data " + longname, "--data");
}
// Results on stdout, logs on stderr, for every command: with stderr thrown away, stdout holds
// each command's result and not one log line.
TEST(Cli, ResultsOnStdoutAndLogsOnStderr) {
  const std::string dir = tmp("streams");
  fs::remove_all(dir);
  const auto stdout_of = [](const std::string& args) {
    const Result r = shell(shardtrain_bin() + " " + args + " 2>/dev/null");
    EXPECT_EQ(r.code, 0) << args << "\n" << r.out;
    EXPECT_EQ(r.out.find("INFO"), std::string::npos) << args << ": a log line on stdout\n" << r.out;
    EXPECT_EQ(r.out.find("WARN"), std::string::npos) << args << ": a log line on stdout\n" << r.out;
    return r.out;
  };
  EXPECT_NE(stdout_of("prepare --tokenizer " + kTok + " --input " + source("data/demo/val.jsonl") +
                      " --output " + dir + "/val.h5 --seq-len 64")
                .find("200 samples -> "),
            std::string::npos);
  EXPECT_EQ(stdout_of("train --model tiny --threads 1 --steps 2 --data " + dir + "/val.h5 " +
                      "--checkpoint-dir " + dir + "/ck --save-every 2 --save-model " + dir + "/m"),
            "")
      << "train's progress is log";
  EXPECT_NE(stdout_of("inspect " + dir + "/ck/latest").find("step 2"), std::string::npos);
  EXPECT_NE(
      stdout_of("convert --input " + dir + "/ck/latest --output " + dir + "/hf").find("converted "),
      std::string::npos);
  const std::string eval =
      stdout_of("eval --threads 1 --weights " + dir + "/m --data " + dir + "/val.h5");
  EXPECT_EQ(eval.rfind("{", 0), 0u) << "eval's first line is its JSON:\n" << eval;
  const Result both = run("train --model tiny --threads 1 --steps 1 --data " + dir + "/val.h5");
  EXPECT_NE(both.out.find("step 1/1"), std::string::npos) << "the log still reaches stderr\n"
                                                          << both.out;
  // Counts read as numbers: one rank, one node, not "1 ranks on 1 nodes".
  for (const char* said : {"topology    1 rank on 1 node x 1 rank per node", " s (1 rank)",
                           "global batch 8 rows (8 per rank x 1 accumulation x 1 rank)"})
    EXPECT_NE(both.out.find(said), std::string::npos) << said << "\n" << both.out;
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
  std::ofstream(p)
      << R"({"model_type":"llama","vocab_size":512,"hidden_size":64,"intermediate_size":128,)"
      << R"("num_hidden_layers":2,"num_attention_heads":6,"num_key_value_heads":2})";
  expect_usage_error("train --model " + p, "num_attention_heads");
}
TEST(Cli, ConfigFileValuesAreValidatedToo) {
  const auto p = tmp("run.cfg");
  std::ofstream(p) << "model = tiny\nlr = -0.5\n";
  expect_usage_error("train --config " + p, "--lr");
}
// Boost.Program_options' own error message loops forever on these (found by
// tests/fuzz/fuzz_options).
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
  const std::string top =
      run("--help").out;  // what the trainer takes: every model family, chat data
  for (const char* s : {"Llama-family", "Llama-2 and 3.x", "Mistral", "Qwen2", "--format chat"})
    EXPECT_NE(top.find(s), std::string::npos) << s << "\n" << top;
}

// The banner says "only at the end" for the settings whose 0 means that, never "every 0 steps".
TEST(Cli, BannerSaysOnlyAtTheEndForZero) {
  EXPECT_EQ(cli::cadence(0, "step"), "only at the end");
  EXPECT_EQ(cli::cadence(1, "step"), "every step");
  EXPECT_EQ(cli::cadence(500, "step"), "every 500 steps");
  const std::string ckpt = tmp("banner_ckpt");
  auto banner = [&](const std::string& every) {
    fs::remove_all(ckpt);
    auto r = run("train --model tiny --steps 2 --threads 1 --val-batches 1 --checkpoint-dir " +
                 ckpt + kData + every);
    EXPECT_EQ(r.code, 0) << r.out;
    const auto begin = r.out.find("shardtrain train: job"),
               end = r.out.find("collective timeout", begin);
    return begin == std::string::npos || end == std::string::npos
               ? r.out
               : r.out.substr(begin, end - begin);
  };
  const std::string zero = banner("--save-every 0 --val-every 0 --breakdown-every 0");
  EXPECT_NE(zero.find("checkpoints " + ckpt + " (only at the end, resume off)"), std::string::npos)
      << zero;
  EXPECT_NE(zero.find("breakdown only at the end"), std::string::npos) << zero;
  EXPECT_NE(zero.find("validation only at the end"), std::string::npos) << zero;
  EXPECT_EQ(zero.find("every 0"), std::string::npos) << zero;
  const std::string set = banner("--save-every 5 --val-every 1 --breakdown-every 2 --log-every 3");
  EXPECT_NE(set.find("checkpoints " + ckpt + " (every 5 steps, resume off)"), std::string::npos)
      << set;
  EXPECT_NE(
      set.find("progress every 3 steps, breakdown every 2 progress lines | validation every step"),
      std::string::npos)
      << set;
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
  for (const char* opt : {"--on-signal", "--on-nonfinite", "--max-nonfinite-steps"})
    EXPECT_GT(help.find(opt), run_control) << opt;
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
  auto r =
      run("train --model tiny --steps 200 --lr 3e-3 --threads 1 --log-every 50 --val-batches 0 "
          "--metrics-file " +
          metrics + kData + " --save-model " + out);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("step 200/200"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("val_loss"), std::string::npos) << r.out;
  const auto rows = read_jsonl(metrics);
  ASSERT_EQ(rows.size(), 200u);
  for (const char* k : {"step", "loss", "lr", "grad_norm", "tokens_per_s", "tflops_per_device",
                        "mfu", "step_time_s", "peak_mem_bytes"})
    ASSERT_TRUE(rows.back().contains(k)) << k;
  const double first = rows.front()["loss"], last = rows.back()["loss"];
  EXPECT_LT(last, 0.5 * first) << "initial " << first << ", final " << last;
  EXPECT_GT(rows.back()["tokens_per_s"].get<double>(), 0);
  EXPECT_GT(rows.back()["peak_mem_bytes"].get<int64_t>(), 0);

  auto e = run("eval --model " + out + "/config.json --weights " + out + " --threads 1 --data " +
               kDemo + "/train.val.h5");
  ASSERT_EQ(e.code, 0) << e.out;
  const auto j = first_json_line(e.out);
  EXPECT_NE(e.out.find("loaded"), std::string::npos);
  EXPECT_NEAR(j["loss"].get<double>(), rows.back()["val_loss"].get<double>(), 1e-4)
      << "eval sees the trained weights";
  EXPECT_NEAR(j["perplexity"].get<double>(), std::exp(j["loss"].get<double>()),
              1e-6 * j["perplexity"].get<double>());
}

// Exact-match accuracy, measured by generation, climbs from ~0 during training, and eval and
// generate reproduce it from the saved model; sampling is reproducible from --seed. 400 steps
// (measured: 0 at step 0; at step 400 0.22 on one machine and 0.06 on an AMD EPYC one, whose
// float sums take another path: at least 2 of the 50 answers exact, from none).
TEST(Cli, ExactMatchClimbsAndEvalAndGenerateAgree) {
  const auto metrics = tmp("acc_metrics.jsonl"), out = tmp("acc_model");
  fs::remove_all(out);
  const std::string acc = " --accuracy-file " + source("data/demo/val.jsonl") + " --tokenizer " +
                          kTok + " --accuracy-samples 50 --max-new-tokens 12 ";
  auto r =
      run("train --model tiny --steps 400 --batch-size 32 --lr 4e-3 --warmup-steps 40 --threads 1 "
          "--val-every 400 --log-every 400 --metrics-file " +
          metrics + kData + acc + " --save-model " + out);
  ASSERT_EQ(r.code, 0) << r.out;
  const auto rows = read_jsonl(metrics);
  ASSERT_EQ(rows.front()["step"], 0);
  const double before = rows.front()["val_exact_match"], after = rows.back()["val_exact_match"];
  EXPECT_LE(before, 0.05);
  EXPECT_GE(after, 0.04) << r.out;
  EXPECT_GT(after, before) << r.out;
  auto e = run("eval --model " + out + " --weights " + out + " --threads 1" + acc);
  ASSERT_EQ(e.code, 0) << e.out;
  const auto j = first_json_line(e.out);
  EXPECT_NEAR(j["exact_match"].get<double>(), after, 1e-9);
  EXPECT_EQ(j["total"], 50);

  const std::string gen = "generate --model " + out + " --weights " + out + " --tokenizer " + kTok +
                          " --template alpaca --prompt 'Reverse the digits.' --alpaca-input '1 2 3 "
                          "4' --max-new-tokens 12";
  auto g = run(gen);
  ASSERT_EQ(g.code, 0) << g.out;
  EXPECT_NE(g.out.find_first_of("0123456789"), std::string::npos) << g.out;
  auto s1 = run(gen + " --temperature 1.0 --top-p 0.9 --seed 5"),
       s2 = run(gen + " --temperature 1.0 --top-p 0.9 --seed 5");
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
  auto r = run(
      "train --model tiny --steps 3 --threads 1 --val-batches 0 --profile-step 2 --profile-dir " +
      dir + kData);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.find("gpuGetDeviceCount"), std::string::npos)
      << "Kineto's GPU probe stays quiet on CPU:\n"
      << r.out;
  std::ifstream in(dir + "/trace-rank0.json");
  ASSERT_TRUE(in) << r.out;
  const auto trace = nlohmann::json::parse(in);
  std::map<std::string, int> names;
  for (const auto& e : trace["traceEvents"])
    if (e.contains("name") && e.contains("cat"))
      names[e["cat"].get<std::string>() + "/" + e["name"].get<std::string>()]++;
  EXPECT_EQ(names["user_annotation/shardtrain::optimizer"], 1);
  EXPECT_GT(names["cpu_op/aten::mm"], 10)
      << "4 linears per layer forward, two matmuls each backward";
  const std::string md = slurp(dir + "/profile-rank0.md");
  EXPECT_NE(md.find("Profile of step 2 (CPU, rank 0)"), std::string::npos) << md;
  EXPECT_NE(md.find("`aten::mm` | GEMM"), std::string::npos) << md;
  double total = 0;
  for (const char* row :
       {"| GEMM | ", "| attention | ", "| elementwise and other | ", "| optimizer | ",
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

// ---- defaults and messages ----

// --help shows defaults as one types them; the default lr is a fine-tuning rate.
TEST(Cli, HelpShowsDefaultsWithoutFloatNoise) {
  const std::string help = run("train --help-all").out;
  for (const char* d :
       {"--lr arg (=1e-4)", "--min-lr-ratio arg (=0.1)", "--beta2 arg (=0.95)",
        "--adam-eps arg (=1e-8)", "--lora-dropout arg (=0.05)", "--grad-clip arg (=1)"})
    EXPECT_NE(help.find(d), std::string::npos) << d << "\n" << help;
  const std::regex noise("0{5,}|9{5,}");
  for (const char* c : {"train --help-all", "eval --help", "generate --help", "prepare --help",
                        "convert --help", "inspect --help", "preflight --help", "scaling --help",
                        "plan --help-all", "report --help"}) {
    const Result r = run(c);
    EXPECT_EQ(r.code, 0) << c;
    std::smatch m;
    EXPECT_FALSE(std::regex_search(r.out, m, noise)) << c << " prints '" << m.str() << "':\n"
                                                     << r.out;
  }
  expect_usage_error("train --model tiny --lr 0", "try 1e-4 (the default) for fine-tuning");
}
TEST(Cli, DefaultLrIsAFineTuningRate) {
  const auto metrics = tmp("default_lr.jsonl");
  auto r =
      run("train --model tiny --steps 1 --threads 1 --val-batches 0 --warmup-steps 0 --lr-schedule "
          "constant"
          " --metrics-file " +
          metrics + kData);
  ASSERT_EQ(r.code, 0) << r.out;
  const auto rows = read_jsonl(metrics);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_DOUBLE_EQ(rows[0]["lr"].get<double>(), 1e-4);
}

// An unknown option is one line naming it and the nearest option, or for a PyTorch / Hugging
// Face Trainer flag, shardtrain's equivalent; none of them is an alias.
TEST(Cli, UnknownOptionsNameTheNearestOrTheEquivalent) {
  expect_usage_error("train --model tiny --lrr 3", "unknown option --lrr; did you mean --lr?");
  expect_usage_error("train --model tiny --stpes 3",
                     "unknown option --stpes; did you mean --steps?");
  expect_usage_error("train --model tiny --grad_accum 2", "did you mean --grad-accum?");
  expect_usage_error("train --model tiny --frobnicate 3",
                     "unknown option --frobnicate; see --help");
  expect_usage_error("train --model tiny --learning-rate 3e-4",
                     "unknown option --learning-rate; shardtrain's equivalent is --lr");
  expect_usage_error("train --model tiny --learning_rate 3e-4",
                     "unknown option --learning_rate; shardtrain's equivalent is --lr");
  expect_usage_error("train --model tiny --max_steps 10", "equivalent is --steps");
  expect_usage_error("train --model tiny --max-steps=10",
                     "unknown option --max-steps; shardtrain's equivalent is --steps");
  expect_usage_error("train --model tiny --gradient-accumulation-steps 4",
                     "equivalent is --grad-accum");
  expect_usage_error("train --model tiny --bf16", "equivalent is --param-dtype bf16");
  expect_usage_error("train --model tiny --fp16", "bf16 (--param-dtype bf16) is what it supports");
  expect_usage_error("train --model tiny --per-device-train-batch-size 4",
                     "equivalent is --batch-size");
  expect_usage_error("train --model tiny --num-train-epochs 3", "equivalent is --epochs");
  expect_usage_error("train --model tiny --logging-steps 5", "equivalent is --log-every");
  expect_usage_error("train --model tiny --save-steps 5", "equivalent is --save-every");
  expect_usage_error("train --model tiny --max-grad-norm 1", "equivalent is --grad-clip");
  expect_usage_error("train --model tiny --lr-scheduler-type cosine",
                     "equivalent is --lr-schedule");
  expect_usage_error("train --model tiny --warmup-ratio 0.1", "equivalent is --warmup-steps");
  expect_usage_error("train --model tiny --model-name-or-path x", "equivalent is --weights");
  expect_usage_error("train --model tiny --output-dir x",
                     "--save-model DIR (the final model) or --checkpoint-dir");
  expect_usage_error("train --model tiny --resume-from-checkpoint x", "equivalent is --resume");
  // TRL's names: --beta is DPO's, not AdamW's.
  expect_usage_error("train --model tiny --beta 0.5",
                     "unknown option --beta; shardtrain's equivalent is --dpo-beta");
  expect_usage_error("train --model tiny --loss_type ipo", "equivalent is --dpo-loss");
  expect_usage_error("train --model tiny --max_length 512",
                     "--data's rows keep the length they were prepared with (prepare --seq-len)");
  expect_usage_error("prepare --max-length 512", "equivalent is --seq-len");
  expect_usage_error("generate --bf16", "equivalent is --param-dtype bf16");
  expect_usage_error("eval --learning-rate 1",
                     "unknown option --learning-rate; see --help");  // eval has no --lr
}

TEST(Cli, OptimizerValuesAreCheckedWithTheAcceptedOnesNamed) {
  expect_usage_error("train --model tiny --lr-schedule linear",
                     "--lr-schedule must be one of cosine, steplr, constant, got 'linear'");
  expect_usage_error("train --model tiny --min-lr-ratio 2", "--min-lr-ratio must be in [0, 1]");
  expect_usage_error("train --model tiny --adam-eps 0", "--adam-eps must be positive");
  expect_usage_error("train --model tiny --grad-clip -1", "--grad-clip must be >= 0");
}

// Abbreviations are refused: Boost's guessing made --lora-r 8 turn LoRA on.
TEST(Cli, AbbreviationsAreRefused) {
  expect_usage_error("train --model tiny --lora-r 8",
                     "unknown option --lora-r; did you mean --lora-rank?");
  expect_usage_error("train --model tiny --save-ev 10",
                     "unknown option --save-ev; did you mean --save-every?");
  expect_usage_error("prepare --seq 64", "unknown option --seq; did you mean --seq-len?");
  const auto cfg = tmp("abbreviated.cfg");
  std::ofstream(cfg) << "model = tiny\nlora-r = 8\n";
  expect_usage_error("train --config " + cfg,
                     "--config " + cfg + ": unknown option lora-r; did you mean lora-rank?");
}

// generate: the answer alone on stdout, logs on stderr; a prompt over the model's positions is
// refused.
TEST(Cli, GenerateWritesTheAnswerAloneToStdout) {
  const auto model = tmp("gen_model"), out = tmp("gen_answer.txt"), err = tmp("gen_log.txt");
  fs::remove_all(model);
  auto t =
      run("train --model tiny --steps 2 --threads 1 --val-batches 0 --save-model " + model + kData);
  ASSERT_EQ(t.code, 0) << t.out;
  const std::string gen = std::string(SHARDTRAIN_BIN) + " generate --threads 1 --weights " + model +
                          " --tokenizer " + kTok;
  auto g = shell(gen + " --prompt 'Reverse the digits.' --prompt 'Add' --max-new-tokens 4 > " +
                 out + " 2> " + err);
  ASSERT_EQ(g.code, 0) << slurp(err);
  const std::string answer = slurp(out), log = slurp(err);
  EXPECT_EQ(std::count(answer.begin(), answer.end(), '\n'), 2) << "one line per prompt:\n"
                                                               << answer;
  EXPECT_EQ(answer.find("INFO"), std::string::npos) << answer;
  EXPECT_NE(log.find("loaded"), std::string::npos) << "the log goes to stderr:\n" << log;
  const int64_t limit =
      nlohmann::json::parse(slurp(model + "/config.json"))["max_position_embeddings"];
  std::string prompt;
  for (int64_t i = 0; i <= limit; ++i) prompt += "7 ";
  expect_usage_error(
      "generate --threads 1 --weights " + model + " --tokenizer " + kTok + " --prompt '" + prompt +
          "'",
      "the model takes at most " + std::to_string(limit) + " (max_position_embeddings)");
}

// Decoding stops when prompt and answer fill the model's positions, and says why: a model whose
// final norm is zero gives equal logits, so greedy decoding always picks token 0.
TEST(Cli, GenerateStopsAtTheContextLimit) {
  const model::ModelConfig cfg = model::model_preset("tiny");
  model::ParamStore p = model::ParamStore::initialize(cfg, 1);
  std::map<std::string, at::Tensor> w;
  for (const auto& [name, t] : p.named()) w[name] = name == "model.norm.weight" ? t * 0 : t;
  const model::Decoder never_eos(cfg, w, {}, {}, at::kCPU, at::kFloat);
  model::GenerateConfig g;
  g.max_new_tokens = 20;
  g.max_context = 8;
  g.stop_ids = {2};
  const auto run = [&] { return model::generate(never_eos, {{1, 3, 4}}, {0}, g).front(); };
  EXPECT_EQ(run().ids, (std::vector<int32_t>{0, 0, 0, 0, 0}));
  EXPECT_EQ(run().stop, model::StopReason::kContext);
  g.max_new_tokens = 4;
  EXPECT_EQ(run().ids.size(), 4u);
  EXPECT_EQ(run().stop, model::StopReason::kLength) << "--max-new-tokens ended it";
  g.stop_ids = {0};
  EXPECT_TRUE(run().ids.empty());
  g.stop_ids = {2, 0};  // any stop id ends it (Llama-3-Instruct's <|end_of_text|> and <|eot_id|>)
  EXPECT_TRUE(run().ids.empty());
  EXPECT_EQ(run().stop, model::StopReason::kEos);
  g.stop_ids = {2};
  g.stop_tokens = {{0, 0}};  // a --stop string's ids end it, and are dropped
  EXPECT_TRUE(run().ids.empty());
  EXPECT_EQ(run().stop, model::StopReason::kStopString);
}

// A progress line's tokens/s covers every step since the previous line, not its last one.
TEST(Cli, ProgressThroughputCoversTheInterval) {
  train::IntervalThroughput interval;
  interval.add(1000, 1.0);  // a slow step (a checkpoint's, the warm-up's) and two fast ones
  interval.add(1000, 0.1);
  interval.add(1000, 0.1);
  train::StepMetrics m;
  m.step_time_s = 0.1;
  m.tokens_per_s = 10000;
  interval.take(m, /*flops_per_token=*/1e9, /*peak_tflops=*/10, /*world_size=*/2);
  EXPECT_DOUBLE_EQ(m.tokens_per_s, 3000 / 1.2);
  EXPECT_DOUBLE_EQ(m.step_time_s, 0.4);
  EXPECT_DOUBLE_EQ(m.tflops_per_device, 2500 * 1e9 / 2 / 1e12);
  EXPECT_DOUBLE_EQ(m.mfu, m.tflops_per_device / 10);
  train::StepMetrics next;
  next.tokens_per_s = 7;
  interval.take(next, 1e9, 10, 2);  // a new interval: nothing since
  EXPECT_EQ(next.tokens_per_s, 7);
}

// The cross-rank breakdown comes with every --breakdown-every'th progress line and at the end.
TEST(Cli, BreakdownEveryNthProgressLineAndAtTheEnd) {
  auto breakdowns = [](const std::string& every) {
    auto r = run("train --model tiny --steps 12 --threads 1 --val-batches 0 --log-every 2 --data " +
                 kDemo + "/train.h5" + every);
    EXPECT_EQ(r.code, 0) << r.out;
    int n = 0;
    for (size_t at = r.out.find("step time by phase"); at != std::string::npos;
         at = r.out.find("step time by phase", at + 1))
      ++n;
    return n;
  };
  EXPECT_EQ(breakdowns(" --breakdown-every 3"), 3)
      << "progress lines 3 and 6 (steps 4 and 10), and step 12";
  EXPECT_EQ(breakdowns(" --breakdown-every 0"), 1) << "the end only";
  EXPECT_EQ(breakdowns(""), 1) << "the default, every 10th progress line: only the end of 7 lines";
  expect_usage_error("train --model tiny --breakdown-every -1", "--breakdown-every");
}

// The loss chart's y axis starts where a loss can be: never below 0, else from the data.
TEST(ReportAxis, LossAxisNeverGoesBelowZero) {
  report::RunData run;
  run.label = "r";
  for (int s = 1; s <= 50; ++s) {
    report::StepRecord r;
    r.step = s;
    r.loss = 6.0 * std::exp(-0.1 * s) + 0.02;
    run.steps.push_back(r);
  }
  const report::Panel loss = report::loss_chart({run}, 0, "").panels[0];
  EXPECT_EQ(report::y_axis_range(loss).first, 0.0);
  report::Panel free = loss;
  free.yfloor.reset();
  EXPECT_LT(report::y_axis_range(free).first, 0.0)
      << "without the floor, the headroom went negative";
  for (auto& r : run.steps) r.loss = 2.0 + 0.004 * static_cast<double>(r.step);
  const auto [lo, hi] = report::y_axis_range(report::loss_chart({run}, 0, "").panels[0]);
  EXPECT_GT(lo, 1.5) << "a flat loss keeps an axis of its own range";
  EXPECT_LE(lo, 2.004);
  EXPECT_GE(hi, 2.2);
}
