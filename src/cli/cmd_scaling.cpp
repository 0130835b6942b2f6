// `shardtrain scaling`: reads one metrics file per node count and writes a markdown table, a CSV
// and a two-panel PNG of throughput and scaling efficiency. Serial work; under mpirun rank 0 does
// it.
#include <cmath>
#include <filesystem>
#include <iostream>

#include "shardtrain/cli/commands.h"
#include "shardtrain/cli/run_checks.h"
#include "shardtrain/report/chart.h"
#include "shardtrain/report/files.h"
#include "shardtrain/report/run_report.h"
#include "shardtrain/report/scaling.h"
#include "shardtrain/runtime/error.h"

namespace fs = std::filesystem;

namespace shardtrain::cli {
namespace {

// The steps that carry tokens_per_s, by step (report::parse_metrics: a step a resumed run repeats
// keeps its last line; a last line cut short by a killed job is dropped with a note). Errors
// name the --run they are about.
report::RunSteps read_run(const ScalingRun& run, std::vector<std::string>& notes) {
  const std::string what = "--run " + std::to_string(run.nodes) + ":";
  report::RunData data;
  try {
    data = report::parse_metrics(report::read_text(run.metrics), run.metrics, notes);
  } catch (const runtime::UsageError& e) {
    throw runtime::UsageError(what + e.what());
  }
  report::RunSteps steps;
  steps.nodes = run.nodes;
  steps.source = run.metrics;
  for (const auto& s : data.steps) {
    if (!std::isfinite(s.tokens_per_s)) continue;  // a line without throughput (validation only)
    steps.tokens_per_s.push_back(s.tokens_per_s);
    steps.mfu.push_back(s.mfu);
  }
  if (steps.tokens_per_s.empty())
    throw runtime::UsageError(
        what + run.metrics +
        ": no line has a numeric tokens_per_s; pass the JSONL that train --metrics-file wrote");
  return steps;
}

}  // namespace

int cmd_scaling(const std::vector<std::string>& args, runtime::MpiEnv& env) {
  std::string help;
  ScalingOptions o = runtime::parse_on_every_rank([&] { return parse_scaling(args, &help); });
  if (o.common.wants_help()) return print_help(help, env);
  if (env.rank() != 0) return 0;
  std::vector<std::string> notes;
  std::vector<report::RunSummary> runs;
  for (const auto& run : o.runs) {
    runs.push_back(report::summarize_run(read_run(run, notes), o.skip_steps));
    const auto& s = runs.back();
    if (s.kept_warmup)
      notes.push_back(s.source + " (" + std::to_string(s.nodes) + " nodes) has only " +
                      std::to_string(s.steps) + " measured steps, not more than --skip-steps " +
                      std::to_string(o.skip_steps) + ", so all of them were used, warmup included");
  }
  const auto rows = report::scaling_rows(runs);
  const fs::path dir = report::make_out_dir(o.out_dir);
  const std::string md = report::scaling_markdown(rows, o.title, notes);
  report::write_text(dir / "scaling.md", md);
  report::write_text(dir / "scaling.csv", report::scaling_csv(rows));
  report::draw_chart_png((dir / "scaling.png").string(), report::scaling_panels(rows, o.title), 2);
  std::cout << md << "\nwrote " << (dir / "scaling.md").string() << ", scaling.csv and scaling.png"
            << std::endl;
  return 0;
}

}  // namespace shardtrain::cli
