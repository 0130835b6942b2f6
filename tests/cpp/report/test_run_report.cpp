// `shardtrain report` and its pure parts (run_report.h): parsing metrics lines, smoothing, labels,
// summary numbers and chart layout. Part of the test_report binary; PNGs are checked by Pillow.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "run_binary.h"
#include "shardtrain/report/run_report.h"
#include "shardtrain/runtime/error.h"
#include "shardtrain/runtime/stats.h"

namespace fs = std::filesystem;
using namespace shardtrain;
using namespace shardtrain::report;
using namespace testing_support;
using nlohmann::json;

namespace {

const double kNaN = std::nan("");

json phases(double data, double fwd, double bwd, double opt, double comm, double ckpt) {
  return {{"data_wait", data}, {"forward", fwd},       {"backward", bwd},
          {"optimizer", opt},  {"exposed_comm", comm}, {"checkpoint", ckpt}};
}

// Run A: 5 steps with phases, cross-rank data on steps 2-4 (busy-time ratios 1.25, 1.1, 1.5), a
// straggler named rank 3 twice, a validation loss, and a last line cut short.
std::string run_a_text() {
  const double loss[] = {2.0, 1.8, 1.6, 1.5, 1.4}, tps[] = {100, 1000, 1100, 1200, 900};
  const double mfu[] = {0.1, 0.4, 0.42, 0.44, 0.38}, busy[] = {0, 1.25, 1.1, 1.5, 0};
  std::string text = json{{"step", 0}, {"val_loss", 3.0}, {"val_exact_match", 0.0}}.dump() + "\n";
  for (int s = 1; s <= 5; ++s) {
    json j = {{"step", s},
              {"loss", loss[s - 1]},
              {"lr", 1e-4},
              {"tokens_per_s", tps[s - 1]},
              {"mfu", mfu[s - 1]},
              {"tflops_per_device", 1.0},
              {"step_time_s", s == 1 ? 2.0 : 1.0},
              {"phases", phases(0.05, s == 1 ? 1.25 : 0.25, 0.5, 0.1, 0.1, 0)}};
    if (s == 5) j["val_loss"] = 1.45;
    if (busy[s - 1] > 0) {
      j["phases_across_ranks"]["forward"] = {{"min", 0.2}, {"median", 0.25}, {"max", 0.4}};
      j["straggler"] = {{"rank", s == 4 ? 1 : 3},
                        {"host", s == 4 ? "node-a" : "node-b"},
                        {"busy_s", busy[s - 1]},
                        {"median_busy_s", 1.0},
                        {"step_time_s", 1.0}};
    }
    text += j.dump() + "\n";
  }
  return text + R"({"step": 6, "loss": 1.3, "tokens_per)";
}

// Run B: the older format, without phases or MFU.
std::string run_b_text() {
  const double loss[] = {2.5, 2.0, 1.0, 0.75}, tps[] = {500, 600, 700, 800};
  std::string text;
  for (int s = 1; s <= 4; ++s)
    text +=
        json{{"step", s}, {"loss", loss[s - 1]}, {"tokens_per_s", tps[s - 1]}, {"step_time_s", 0.5}}
            .dump() +
        "\n";
  return text;
}

RunData parsed(const std::string& text, const std::string& label) {
  std::vector<std::string> notes;
  RunData r = parse_metrics(text, label + ".jsonl", notes);
  r.label = label;
  return r;
}

}  // namespace

TEST(RunReport, ParsesStepsPhasesAndCrossRankData) {
  std::vector<std::string> notes;
  const RunData r = parse_metrics(run_a_text(), "a.jsonl", notes);
  ASSERT_EQ(r.steps.size(), 5u);
  EXPECT_EQ(r.ignored_lines, 1u);  // the step-0 validation line
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("a.jsonl: ignored its last line"), std::string::npos) << notes[0];
  const StepRecord& s2 = r.steps[1];
  EXPECT_EQ(s2.step, 2);
  EXPECT_EQ(s2.loss, 1.8);
  EXPECT_EQ(s2.tokens_per_s, 1000);
  EXPECT_TRUE(std::isnan(s2.val_loss));
  EXPECT_EQ(s2.phases.size(), 6u);
  EXPECT_EQ(s2.phases.at("backward"), 0.5);
  EXPECT_EQ(s2.across_ranks.at("forward").max, 0.4);
  EXPECT_EQ(s2.straggler_rank, 3);
  EXPECT_EQ(s2.straggler_host, "node-b");
  EXPECT_EQ(s2.straggler_busy_s, 1.25);
  EXPECT_EQ(r.steps[4].val_loss, 1.45);
  EXPECT_EQ(r.steps[0].straggler_rank, -1);
  // null (a NaN as nlohmann writes it), a repeated step (a resumed run: the last line wins), order.
  const RunData d = parse_metrics(
      "{\"step\": 3, \"loss\": 9}\n{\"step\": 1, \"loss\": null}\n[1]\n{\"step\": 3, \"loss\": "
      "2}\n",
      "d.jsonl", notes);
  ASSERT_EQ(d.steps.size(), 2u);
  EXPECT_EQ(d.steps[0].step, 1);
  EXPECT_TRUE(std::isnan(d.steps[0].loss));
  EXPECT_EQ(d.steps[1].loss, 2);
  EXPECT_EQ(d.ignored_lines, 1u);
}

TEST(RunReport, BadLinesAndFilesWithoutStepsAreUsageErrors) {
  std::vector<std::string> notes;
  try {
    parse_metrics("{\"step\": 1, \"loss\": 2}\nnot json\n{\"step\": 2, \"loss\": 2}\n", "bad.jsonl",
                  notes);
    FAIL() << "expected a UsageError";
  } catch (const runtime::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("bad.jsonl: line 2 is not JSON"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(parse_metrics("not json\n", "one.jsonl", notes),
               runtime::UsageError);  // a single line is no truncation
  EXPECT_THROW(parse_metrics("{\"step\": 0, \"val_loss\": 2}\n", "zero.jsonl", notes),
               runtime::UsageError);
  EXPECT_THROW(parse_metrics("", "empty.jsonl", notes), runtime::UsageError);
}

TEST(RunReport, MovingAverageIsATrailingMeanThatSkipsNaN) {
  const auto avg = moving_average({1, 2, 3, 4, 5}, 3);
  EXPECT_EQ(avg, (std::vector<double>{1, 1.5, 2, 3, 4}));
  EXPECT_EQ(moving_average({1, 2, 3}, 1), (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(moving_average({1, 2, 3}, 0), (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(moving_average({4, 8}, 10), (std::vector<double>{4, 6}));
  const auto gap = moving_average({2, kNaN, 4, 6}, 2);
  EXPECT_EQ(gap[0], 2);
  EXPECT_TRUE(std::isnan(gap[1]));
  EXPECT_EQ(gap[2], 4);  // its window holds the NaN and 4
  EXPECT_EQ(gap[3], 5);
}

TEST(RunReport, LabelsUseTheParentDirectoryThenTheStem) {
  EXPECT_EQ(run_labels({"/x/7b-2n/metrics.jsonl", "/x/7b-4n/metrics.jsonl"}),
            (std::vector<std::string>{"7b-2n", "7b-4n"}));
  EXPECT_EQ(run_labels({"/x/sweep/m1.jsonl", "/x/sweep/m2.jsonl"}),
            (std::vector<std::string>{"m1", "m2"}));
  EXPECT_EQ(run_labels({"/x/a/m.jsonl", "/y/a/m.jsonl", "/x/b/m.jsonl"}),
            (std::vector<std::string>{"a/m", "a/m #2", "b/m"}));
  EXPECT_EQ(run_labels({"metrics.jsonl"}),
            (std::vector<std::string>{fs::current_path().filename().string()}));
}

TEST(RunReport, RankSpreadPrefersBusyTimeThenAStepEntry) {
  StepRecord s;
  EXPECT_TRUE(std::isnan(rank_spread(s).slowest));
  s.across_ranks["forward"] = {0.1, 0.2, 0.3};
  s.across_ranks["backward"] = {0.4, 0.5, 0.7};
  RankSpread r = rank_spread(s);
  EXPECT_DOUBLE_EQ(r.slowest, 1.0);  // sum of phase maxima
  EXPECT_DOUBLE_EQ(r.median, 0.7);
  EXPECT_FALSE(r.busy);
  s.straggler_step_s = 0.9;
  EXPECT_EQ(rank_spread(s).slowest, 0.9);
  s.across_ranks["step"] = {0.8, 0.85, 0.95};
  EXPECT_EQ(rank_spread(s).slowest, 0.95);
  EXPECT_EQ(rank_spread(s).median, 0.85);
  s.straggler_busy_s = 0.6;
  s.median_busy_s = 0.5;
  r = rank_spread(s);
  EXPECT_TRUE(r.busy);
  EXPECT_EQ(r.slowest, 0.6);
  EXPECT_EQ(r.median, 0.5);
}

TEST(RunReport, StatsAndMarkdownMatchHandComputedNumbers) {
  EXPECT_EQ(runtime::quantile({5, 1, kNaN, 3, 2, 4}, 0.9), 5);
  EXPECT_EQ(runtime::quantile({5, 1, 3, 2, 4}, 0.5), 3);
  EXPECT_TRUE(std::isnan(runtime::quantile({}, 0.5)));
  const RunStats a = run_stats(parsed(run_a_text(), "runA"));
  EXPECT_EQ(a.steps, 5u);
  EXPECT_EQ(a.final_loss, 1.4);
  EXPECT_EQ(a.final_val_loss, 1.45);
  EXPECT_EQ(a.tokens_per_s, 1000);
  EXPECT_EQ(a.mfu, 0.4);
  EXPECT_EQ(a.step_time_s, 1.0);
  ASSERT_EQ(a.phases.size(), 6u);
  EXPECT_EQ(a.phases[1].phase, "forward");
  EXPECT_EQ(a.phases[1].median_s, 0.25);  // step 1's warmup 1.25 s is outvoted
  EXPECT_EQ(a.phases[1].share, 0.25);
  EXPECT_EQ(a.spread_steps, 3u);
  EXPECT_TRUE(a.spread_busy);
  EXPECT_EQ(a.spread_ratio, 1.25);
  EXPECT_EQ(a.worst_ratio, 1.5);
  EXPECT_EQ(a.worst_step, 4);
  EXPECT_EQ(a.straggler_rank, 3);
  EXPECT_EQ(a.straggler_count, 2u);
  EXPECT_EQ(a.straggler_steps, 3u);
  const RunStats b = run_stats(parsed(run_b_text(), "runB"));
  EXPECT_EQ(b.tokens_per_s, 650);
  EXPECT_TRUE(std::isnan(b.mfu));
  EXPECT_TRUE(b.phases.empty());
  const std::string md = report_markdown({a, b}, "", {"a note"});
  EXPECT_NE(md.find("# Training report"), std::string::npos) << md;
  EXPECT_NE(md.find("| runA | 5 | 1.4000 | 1.4500 | 1000 | 40.0% | 1 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| runB | 4 | 0.7500 | n/a | 650 | n/a | 0.5 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| backward | 0.5 | 50.0% |"), std::string::npos) << md;
  EXPECT_NE(md.find("1.25x at the median, 1.50x at worst (step 4)"), std::string::npos) << md;
  EXPECT_NE(md.find("rank 3 (node-b), on 2 of 3 steps"), std::string::npos) << md;
  EXPECT_NE(md.find("No per-phase timings"), std::string::npos) << md;
  EXPECT_NE(md.find("Note: a note"), std::string::npos) << md;
  RunStats tiny = a;  // seconds never print with an exponent
  tiny.phases[0].median_s = 5.511e-05;
  tiny.step_time_s = 1234.5;
  const std::string tiny_md = report_markdown({tiny}, "", {});
  EXPECT_NE(tiny_md.find("| data_wait | 0.00005511 |"), std::string::npos) << tiny_md;
  EXPECT_NE(tiny_md.find("| step (step_time_s) | 1234 |"), std::string::npos) << tiny_md;
}

TEST(RunReport, ChartsHaveTheExpectedPanelsAndCutSpikesOff) {
  const std::vector<RunData> runs = {parsed(run_a_text(), "runA"), parsed(run_b_text(), "runB")};
  const ChartSpec loss = loss_chart(runs, 3, "T");
  ASSERT_EQ(loss.panels.size(), 1u);
  EXPECT_EQ(loss.panels[0].title.rfind("T: loss", 0), 0u) << loss.panels[0].title;
  // faint per-step lines (unnamed), then the averages, then runA's validation markers.
  ASSERT_EQ(loss.panels[0].series.size(), 5u);
  EXPECT_TRUE(loss.panels[0].series[0].name.empty());
  EXPECT_EQ(loss.panels[0].series[2].name, "runA train");
  const std::vector<double> want = {2.0, 1.9, 1.8, 4.9 / 3, 1.5};  // trailing means of 3
  ASSERT_EQ(loss.panels[0].series[2].y.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(loss.panels[0].series[2].y[i], want[i], 1e-12) << i;
  EXPECT_EQ(loss.panels[0].series[4].name, "runA val");
  EXPECT_TRUE(loss.panels[0].series[4].markers);
  EXPECT_EQ(loss_chart(runs, 0, "").panels[0].series.size(), 3u);
  const ChartSpec tput = throughput_chart(runs, "");
  ASSERT_EQ(tput.panels.size(), 2u);
  EXPECT_DOUBLE_EQ(tput.panels[1].series[0].y[1], 40);  // MFU in percent
  const std::vector<RunStats> stats = {run_stats(runs[0]), run_stats(runs[1])};
  const ChartSpec br = breakdown_chart(runs, stats, "");
  ASSERT_EQ(br.panels.size(), 4u);  // per run: phases, then across ranks
  EXPECT_EQ(br.columns, 2);
  const Panel& ph = br.panels[0];
  ASSERT_EQ(ph.series.size(), 7u);  // step total and six phases
  ASSERT_TRUE(ph.ymax.has_value());
  EXPECT_DOUBLE_EQ(*ph.ymax, 2.5);  // 1.25 x step total's 90th percentile (2 s, step 1's warmup)
  EXPECT_NE(br.panels[1].xlabel.find("rank 3 on node-b"), std::string::npos) << br.panels[1].xlabel;
  EXPECT_NE(br.panels[2].title.find("no per-phase timings"), std::string::npos)
      << br.panels[2].title;
  EXPECT_NE(br.panels[3].title.find("no phases_across_ranks"), std::string::npos)
      << br.panels[3].title;
  EXPECT_EQ(breakdown_chart({runs[1]}, {stats[1]}, "").panels.size(), 1u);
  EXPECT_THROW(breakdown_chart(runs, {stats[0]}, ""),
               runtime::Error);  // stats must match runs one to one
}

namespace {

std::string report_dir(const std::string& name) {
  const std::string dir = tmp(name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string write_run(const std::string& dir, const std::string& text) {
  fs::create_directories(dir);
  std::ofstream(dir + "/metrics.jsonl") << text;
  return dir + "/metrics.jsonl";
}

void expect_report_usage_error(const std::string& args, const std::string& words) {
  const auto r = run("report " + args);
  EXPECT_EQ(r.code, 2) << args << "\n" << r.out;
  EXPECT_NE(r.out.find(words), std::string::npos) << "message should say " << words << ":\n"
                                                  << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << "one line:\n" << r.out;
}

}  // namespace

TEST(ReportCli, WritesThreeChartsPillowReadsAndAnExactSummary) {
  const std::string dir = report_dir("report_cli");
  const auto a = write_run(dir + "/runA", run_a_text());
  const auto b = write_run(dir + "/runB", run_b_text());
  const auto r =
      run("report " + a + " " + b + " --out-dir " + dir + "/out --title 'Tiny test' --smooth 3");
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string md = slurp(dir + "/out/summary.md");
  EXPECT_NE(r.out.find("| runA | 5 | 1.4000 | 1.4500 | 1000 | 40.0% | 1 |"), std::string::npos)
      << r.out;
  EXPECT_NE(md.find("# Tiny test"), std::string::npos) << md;
  EXPECT_NE(md.find("| runA | 5 | 1.4000 | 1.4500 | 1000 | 40.0% | 1 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| runB | 4 | 0.7500 | n/a | 650 | n/a | 0.5 |"), std::string::npos) << md;
  for (const char* row :
       {"| data_wait | 0.05 | 5.0% |", "| forward | 0.25 | 25.0% |", "| backward | 0.5 | 50.0% |",
        "| optimizer | 0.1 | 10.0% |", "| exposed_comm | 0.1 | 10.0% |",
        "| checkpoint | 0 | 0.0% |", "| step (step_time_s) | 1 | 100.0% |"})
    EXPECT_NE(md.find(row), std::string::npos) << row << "\n" << md;
  EXPECT_NE(md.find("1.25x at the median, 1.50x at worst (step 4)"), std::string::npos) << md;
  EXPECT_NE(md.find("runA/metrics.jsonl: ignored its last line"), std::string::npos) << md;
  const std::vector<std::tuple<std::string, int, int>> pngs = {
      {"loss.png", 960, 480}, {"throughput.png", 1280, 400}, {"breakdown.png", 1280, 800}};
  for (const auto& [file, w, h] : pngs) {
    const auto png = check_png(dir + "/out/" + file, w, h);
    EXPECT_EQ(png.code, 0) << file << ": " << png.out;
  }
  // One run without phases or cross-rank data still gets every output.
  const auto one = run("report --out-dir " + dir + "/one " + b);
  ASSERT_EQ(one.code, 0) << one.out;
  EXPECT_EQ(check_png(dir + "/one/breakdown.png", 640, 400).code, 0);
  EXPECT_TRUE(fs::is_regular_file(dir + "/one/summary.md"));
}

TEST(ReportCli, BadInputIsAUsageErrorSayingWhatToChange) {
  const std::string dir = report_dir("report_cli_bad");
  const auto good = write_run(dir + "/good", run_b_text());
  const auto garbage = write_run(dir + "/garbage", "not json\n{\"step\": 1}\n");
  const auto none = write_run(dir + "/none", "{\"step\": 0, \"val_loss\": 2}\n");
  const std::string out = " --out-dir " + dir + "/out";
  expect_report_usage_error(dir + "/missing.jsonl" + out, "missing.jsonl is not a file");
  expect_report_usage_error(garbage + out, "line 1 is not JSON");
  expect_report_usage_error(none + out, "no line has a \"step\" of 1 or more");
  expect_report_usage_error(good, "--out-dir is required");
  expect_report_usage_error(out, "no metrics file given");
  expect_report_usage_error(good + out + " --smooth -2", "--smooth must be >= 0");
  expect_report_usage_error(good + " --out-dir " + good, "cannot create the directory");
}

TEST(ReportCli, HelpAndTheCommandList) {
  const auto r = run("report --help");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("--smooth"), std::string::npos) << r.out;
  EXPECT_NE(run("--help").out.find("report "), std::string::npos);
}
