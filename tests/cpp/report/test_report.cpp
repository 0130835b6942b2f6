// The report module (PNG writer, canvas, charts, scaling math) and `shardtrain scaling`. PNGs are
// checked by Pillow (tests/python/check_png.py), not by our own decoder.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "run_binary.h"
#include "shardtrain/report/canvas.h"
#include "shardtrain/report/chart.h"
#include "shardtrain/report/png.h"
#include "shardtrain/report/scaling.h"
#include "shardtrain/runtime/error.h"
#include "shardtrain/runtime/stats.h"

namespace fs = std::filesystem;
using namespace shardtrain;
using namespace shardtrain::report;
using namespace testing_support;

namespace {

const double kNaN = std::nan("");

void expect_ticks(double lo, double hi, int max_ticks, const std::vector<double>& want) {
  const auto got = nice_ticks(lo, hi, max_ticks);
  ASSERT_EQ(got.size(), want.size()) << lo << ".." << hi << " max " << max_ticks;
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-12) << lo << ".." << hi << " tick " << i;
}

RunSummary summary(int nodes, double tps, double mfu = kNaN) {
  RunSummary s;
  s.nodes = nodes;
  s.source = std::to_string(nodes) + "n.jsonl";
  s.tokens_per_s = tps;
  s.mfu = mfu;
  s.used = 5;
  return s;
}

}  // namespace

TEST(Report, NiceTicksCoverTheRangeWithOneTwoFiveSteps) {
  expect_ticks(0, 1, 6, {0, 0.2, 0.4, 0.6, 0.8, 1.0});
  expect_ticks(0, 105, 7, {0, 20, 40, 60, 80, 100, 120});
  expect_ticks(3, 97, 11, {0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100});
  expect_ticks(-0.3, 0.7, 6, {-0.5, 0, 0.5, 1.0});  // step 0.2 would need 7 ticks
  expect_ticks(10, 0, 3, {0, 5, 10});               // swapped ends
  expect_ticks(5, 5, 5, {4.5, 5, 5.5});             // a single value is widened by 10%
  expect_ticks(0, 0, 3, {-1, 0, 1});
  expect_ticks(0, 1e6, 6, {0, 2e5, 4e5, 6e5, 8e5, 1e6});
  expect_ticks(0.5, 0.9, 1, {0.5, 1});  // max_ticks below 2 counts as 2
  EXPECT_TRUE(nice_ticks(kNaN, 1, 5).empty());
  EXPECT_TRUE(nice_ticks(0, INFINITY, 5).empty());
  const auto t = nice_ticks(0, 0.7, 8);
  ASSERT_EQ(t.size(), 8u);
  EXPECT_EQ(format_tick(t[3], 0.1), "0.3");  // no 0.30000000000000004
}

TEST(Report, TickLabels) {
  EXPECT_EQ(format_tick(200000, 50000), "200k");
  EXPECT_EQ(format_tick(1.5e6, 5e5), "1.5M");
  EXPECT_EQ(format_tick(2e6, 5e5), "2M");
  EXPECT_EQ(format_tick(3e9, 1e9), "3G");
  EXPECT_EQ(format_tick(1500, 500), "1.5k");
  EXPECT_EQ(format_tick(500, 500), "500");
  EXPECT_EQ(format_tick(800000, 200000), "800k");
  EXPECT_EQ(format_tick(1.2e6, 200000), "1.2M");
  EXPECT_EQ(format_tick(0.25, 0.05), "0.25");
  EXPECT_EQ(format_tick(1e-17, 0.2), "0");
  EXPECT_EQ(format_tick(-2, 1), "-2");
}

TEST(Report, PngEncoderChecksItsInputAndNamesThePathOnFailure) {
  const std::vector<uint8_t> rgb(2 * 3 * 3, 0x80);
  const auto png = encode_png(2, 3, rgb);
  ASSERT_GT(png.size(), 33u);
  EXPECT_EQ(std::string(png.begin() + 1, png.begin() + 4), "PNG");
  EXPECT_EQ(std::string(png.begin() + 12, png.begin() + 16), "IHDR");
  EXPECT_THROW(encode_png(2, 2, rgb), runtime::Error);  // buffer is for 2x3
  EXPECT_THROW(encode_png(0, 3, {}), runtime::Error);
  try {
    write_png("/nonexistent-dir/chart.png", 2, 3, rgb);
    FAIL() << "expected an Error";
  } catch (const runtime::Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-dir/chart.png"), std::string::npos)
        << e.what();
  }
}

TEST(Report, CanvasDrawsTextLinesAndRectanglesWhereAsked) {
  Canvas c(60, 40);
  EXPECT_EQ(Canvas::text_width("abc"), 18);
  EXPECT_EQ(Canvas::text_width("abc", 2), 36);
  EXPECT_EQ(Canvas::text_height(2), 26);
  c.text(2, 2, "Hi", 0x000000);
  int ink = 0;
  for (int y = 0; y < 40; ++y)
    for (int x = 0; x < 60; ++x)
      if (c.pixel(x, y) != 0xffffff) {
        ++ink;
        EXPECT_TRUE(x >= 2 && x < 14 && y >= 2 && y < 15)
            << "ink outside the text box at " << x << "," << y;
      }
  EXPECT_GT(ink, 10);
  c.fill(0xffffff);
  c.text_vertical(0, 0, "Hi", 0x000000);  // 13 wide, 12 tall
  for (int y = 0; y < 40; ++y)
    for (int x = 0; x < 60; ++x)
      if (c.pixel(x, y) != 0xffffff) {
        EXPECT_TRUE(x < 13 && y < 12) << x << "," << y;
      }
  c.fill(0xffffff);
  c.line(0, 20.5, 60, 20.5, 0xff0000, 1, 6);  // dashed: some of the row is red, some is not
  int red = 0;
  for (int x = 0; x < 60; ++x) red += c.pixel(x, 20) == 0xff0000;
  EXPECT_GT(red, 20);
  EXPECT_LT(red, 50);
  c.fill_rect(-5, -5, 10, 10, 0x00ff00);  // clipped at the canvas edge
  EXPECT_EQ(c.pixel(0, 0), 0x00ff00u);
  EXPECT_EQ(c.pixel(5, 5), 0xffffffu);
  c.rect(30, 0, 10, 10, 0x0000ff);
  EXPECT_EQ(c.pixel(30, 5), 0x0000ffu);
  EXPECT_EQ(c.pixel(35, 5), 0xffffffu);
  c.line(kNaN, 0, 10, 10, 0x000000, 3);  // missing values draw nothing rather than crash
}

TEST(Report, ChartsSurviveEmptyNaNAndOddPanels) {
  const std::string path = tmp("report_odd_panels.png");
  Panel empty{"no series", "x", "y", {}, std::nullopt, std::nullopt, false};
  Panel gaps{"NaN gaps", "x", "y", {}, std::nullopt, std::nullopt, false};
  gaps.series.push_back(
      {"a", {1, 2, 3, 4, 5}, {1, kNaN, 3, 2, kNaN}, palette_color(0), false, true});
  gaps.series.push_back({"all NaN", {kNaN, kNaN}, {kNaN, kNaN}, palette_color(1), true, false});
  gaps.series.push_back({"", {}, {}, palette_color(2), false, false});
  Panel log{"log2 with x <= 0", "nodes", "tokens/s", {}, 0.0, std::nullopt, true};
  log.series.push_back({"s", {0, -1, 1, 2, 1024}, {5, 5, 1, 2, 3}, palette_color(3), false, true});
  Panel flipped{"ymin above ymax, one point", "x", "y", {}, 10.0, 2.0, false};
  flipped.series.push_back({"p", {3}, {4}, palette_color(4), false, false});
  draw_chart_png(path, {empty, gaps, log, flipped}, 3, 320, 240);
  const auto r = check_png(path, 960, 480);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NO_THROW(draw_chart_png(tmp("report_no_panels.png"), {}, 2, 100, 80));
  EXPECT_THROW(draw_chart_png("/nonexistent-dir/c.png", {empty}, 1), runtime::Error);
}

TEST(Scaling, SummarySkipsWarmupStepsUnlessThatLeavesNone) {
  RunSteps run{4, "m.jsonl", {10, 50, 100, 104, 98}, {0.01, 0.05, 0.30, 0.31, kNaN}};
  RunSummary s = summarize_run(run, 2);
  EXPECT_EQ(s.steps, 5u);
  EXPECT_EQ(s.used, 3u);
  EXPECT_FALSE(s.kept_warmup);
  EXPECT_EQ(s.tokens_per_s, 100);
  EXPECT_DOUBLE_EQ(s.mfu, 0.305);  // the step without mfu is left out
  s = summarize_run(run, 5);
  EXPECT_TRUE(s.kept_warmup);
  EXPECT_EQ(s.used, 5u);
  EXPECT_EQ(s.tokens_per_s, 98);
  EXPECT_EQ(summarize_run(run, 0).tokens_per_s, 98);
}

TEST(Scaling, RowsMatchHandComputedNumbers) {
  // Baseline 2 nodes at 1000 tokens/s = 500 per node. 4 nodes: 1900 -> 475/node, 1.9x, 95%.
  // 8 nodes: 3600 -> 450/node, 3.6x, 90%.
  const auto rows =
      scaling_rows({summary(8, 3600, 0.36), summary(2, 1000, 0.40), summary(4, 1900)});
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].nodes, 2);
  EXPECT_DOUBLE_EQ(rows[0].speedup, 1.0);
  EXPECT_DOUBLE_EQ(rows[0].efficiency, 1.0);
  EXPECT_DOUBLE_EQ(rows[0].tokens_per_s_per_node, 500);
  EXPECT_EQ(rows[1].nodes, 4);
  EXPECT_DOUBLE_EQ(rows[1].tokens_per_s_per_node, 475);
  EXPECT_DOUBLE_EQ(rows[1].speedup, 1.9);
  EXPECT_DOUBLE_EQ(rows[1].efficiency, 0.95);
  EXPECT_TRUE(std::isnan(rows[1].mfu));
  EXPECT_EQ(rows[2].nodes, 8);
  EXPECT_DOUBLE_EQ(rows[2].tokens_per_s_per_node, 450);
  EXPECT_DOUBLE_EQ(rows[2].speedup, 3.6);
  EXPECT_DOUBLE_EQ(rows[2].efficiency, 0.9);
  EXPECT_DOUBLE_EQ(rows[2].mfu, 0.36);
  const std::string md = scaling_markdown(rows, "T", {});
  EXPECT_NE(md.find("| 4 | 1900 | 475 | 1.90x | 95.0% | n/a | 5 |"), std::string::npos) << md;
  EXPECT_NE(md.find("at 2 nodes"), std::string::npos) << md;
  EXPECT_NE(scaling_csv(rows).find("\n8,3600,450,3.6,0.9,0.36,5\n"), std::string::npos)
      << scaling_csv(rows);
  const auto panels = scaling_panels(rows, "T");
  ASSERT_EQ(panels.size(), 2u);
  EXPECT_TRUE(panels[0].log2_x);
  EXPECT_EQ(panels[0].series[0].y, (std::vector<double>{1000, 2000, 4000}));  // ideal linear
  EXPECT_FALSE(scaling_panels(scaling_rows({summary(1, 10), summary(3, 27)}), "")[0].log2_x);
}

TEST(Scaling, RowsRejectDuplicateNodeCountsAndNoThroughput) {
  EXPECT_THROW(scaling_rows({summary(2, 10), summary(2, 12)}), runtime::UsageError);
  EXPECT_THROW(scaling_rows({summary(2, kNaN)}), runtime::UsageError);
  EXPECT_THROW(scaling_rows({summary(0, 5)}), runtime::UsageError);
  EXPECT_TRUE(scaling_rows({}).empty());
}

namespace {

// A metrics file as train --metrics-file writes it: a step-0 validation line without throughput,
// then one line per step.
std::string write_metrics(const std::string& path, const std::vector<double>& tps,
                          const std::vector<double>& mfu) {
  std::ofstream out(path);
  out << R"({"step": 0, "val_exact_match": 0.0})"
      << "\n";
  for (size_t i = 0; i < tps.size(); ++i)
    out << nlohmann::json{{"step", i + 1}, {"loss", 2.5}, {"tokens_per_s", tps[i]}, {"mfu", mfu[i]}}
               .dump()
        << "\n";
  return path;
}

std::string scaling_dir(const std::string& name) {
  const std::string dir = tmp(name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void expect_scaling_usage_error(const std::string& args, const std::string& words) {
  const auto r = run("scaling " + args);
  EXPECT_EQ(r.code, 2) << args << "\n" << r.out;
  EXPECT_NE(r.out.find(words), std::string::npos) << "message should say " << words << ":\n"
                                                  << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << "one line:\n" << r.out;
}

}  // namespace

// 1 node: median of steps 3..5 is 1000 tokens/s, MFU 0.40. 2 nodes: 1900 tokens/s (950 per
// node, 1.9x, 95%), MFU 0.38. Steps 1 and 2 (warmup) would pull both medians down.
TEST(ScalingCli, WritesTableCsvAndAChartPillowReads) {
  const std::string dir = scaling_dir("scaling_cli");
  const auto one =
      write_metrics(dir + "/m1.jsonl", {500, 900, 1000, 1010, 990}, {0.2, 0.36, 0.4, 0.404, 0.396});
  const auto two = write_metrics(dir + "/m2.jsonl", {800, 1700, 1900, 1880, 1920},
                                 {0.16, 0.34, 0.38, 0.376, 0.384});
  const auto r = run("scaling --run 2:" + two + " --run 1:" + one + " --out-dir " + dir +
                     "/out --title 'Tiny test'");
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string row2 = "| 2 | 1900 | 950 | 1.90x | 95.0% | 38.0% | 3 |";
  EXPECT_NE(r.out.find(row2), std::string::npos) << r.out;
  const std::string md = slurp(dir + "/out/scaling.md");
  EXPECT_NE(md.find("# Tiny test"), std::string::npos) << md;
  EXPECT_NE(md.find("| 1 | 1000 | 1000 | 1.00x | 100.0% | 40.0% | 3 |"), std::string::npos) << md;
  EXPECT_NE(md.find(row2), std::string::npos) << md;
  EXPECT_NE(md.find("Scaling efficiency = (tokens/s / nodes) / (tokens/s / nodes at 1 node)"),
            std::string::npos)
      << md;
  EXPECT_EQ(slurp(dir + "/out/scaling.csv"),
            "nodes,tokens_per_s,tokens_per_s_per_node,speedup,scaling_efficiency,mfu,steps_used\n"
            "1,1000,1000,1,1,0.4,3\n"
            "2,1900,950,1.9,0.95,0.38,3\n");
  const auto png = check_png(dir + "/out/scaling.png", 1280, 400);
  EXPECT_EQ(png.code, 0) << png.out;
}

TEST(ScalingCli, RunsTooShortForSkipStepsAreUsedWholeWithANote) {
  const std::string dir = scaling_dir("scaling_cli_short");
  const auto one = write_metrics(dir + "/m1.jsonl", {100, 200}, {0.1, 0.2});
  const auto two = write_metrics(dir + "/m2.jsonl", {300, 380, 400, 390}, {0.1, 0.2, 0.2, 0.2});
  std::ofstream(two, std::ios::app)
      << R"({"step": 5, "tokens_per_s": 39)";  // cut short by a killed job
  const auto r =
      run("scaling --run 1:" + one + " --run 2:" + two + " --skip-steps 3 --out-dir " + dir);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("| 1 | 150 | 150 | 1.00x | 100.0% | 15.0% | 2 |"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("| 2 | 390 | 195 | 2.60x | 130.0% | 20.0% | 1 |"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("only 2 measured steps"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ignored its last line"), std::string::npos) << r.out;
  EXPECT_NE(slurp(dir + "/scaling.md").find("only 2 measured steps"), std::string::npos);
}

// A run resumed from a checkpoint writes some steps twice: each step counts once, with its last
// line.
TEST(ScalingCli, AResumedRunCountsARepeatedStepOnceWithItsLastLine) {
  const std::string dir = scaling_dir("scaling_cli_resumed");
  std::ofstream out(dir + "/m.jsonl");
  for (const auto& [step, tps] : std::vector<std::pair<int, double>>{
           {1, 100}, {2, 200}, {3, 300}, {4, 400}, {3, 1000}, {4, 1000}, {5, 1000}})
    out << nlohmann::json{{"step", step}, {"tokens_per_s", tps}}.dump() << "\n";
  out.close();
  const auto r =
      run("scaling --run 1:" + dir + "/m.jsonl --skip-steps 0 --out-dir " + dir + "/out");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("| 1 | 1000 | 1000 | 1.00x | 100.0% | n/a | 5 |"), std::string::npos)
      << r.out;
}

TEST(ScalingCli, BadInputIsAUsageErrorSayingWhatToChange) {
  const std::string dir = scaling_dir("scaling_cli_bad");
  const auto good = write_metrics(dir + "/good.jsonl", {1, 2, 3}, {0.1, 0.1, 0.1});
  std::ofstream(dir + "/none.jsonl") << R"({"step": 1, "loss": 2.0})"
                                     << "\n";
  std::ofstream(dir + "/garbage.jsonl") << "not json\n"
                                        << R"({"tokens_per_s": 5})"
                                        << "\n";
  const std::string out = " --out-dir " + dir + "/out";
  expect_scaling_usage_error("--run 1:" + dir + "/missing.jsonl" + out,
                             "missing.jsonl is not a file");
  expect_scaling_usage_error("--run " + good + out, "NODES:METRICS.jsonl");
  expect_scaling_usage_error("--run four:" + good + out, "NODES:METRICS.jsonl");
  expect_scaling_usage_error("--run 0:" + good + out, "NODES a whole number >= 1");
  expect_scaling_usage_error("--run 1:" + dir + "/none.jsonl" + out,
                             "no line has a numeric tokens_per_s");
  expect_scaling_usage_error("--run 1:" + dir + "/garbage.jsonl" + out, "line 1 is not JSON");
  expect_scaling_usage_error("--run 1:" + good + " --run 1:" + good + out,
                             "pass one run per node count");
  expect_scaling_usage_error("--run 1:" + good, "--out-dir is required");
  expect_scaling_usage_error(out, "--run is required");
  expect_scaling_usage_error("--run 1:" + good + " --skip-steps -1" + out, "--skip-steps");
}

TEST(ScalingCli, HelpAndTheCommandList) {
  const auto r = run("scaling --help");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("--skip-steps"), std::string::npos) << r.out;
  EXPECT_NE(run("--help").out.find("scaling"), std::string::npos);
}
