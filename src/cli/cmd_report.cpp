// `shardtrain report`: reads one or more metrics files and writes loss, throughput and step-time
// breakdown charts and summary.md. Serial work; under mpirun rank 0 does it.
#include <filesystem>
#include <iostream>

#include "shardtrain/cli/commands.h"
#include "shardtrain/cli/run_checks.h"
#include "shardtrain/report/files.h"
#include "shardtrain/report/run_report.h"

namespace fs = std::filesystem;

namespace shardtrain::cli {
namespace {

void draw(const fs::path& path, const report::ChartSpec& c) {
  report::draw_chart_png(path.string(), c.panels, c.columns, c.panel_w, c.panel_h);
}

}  // namespace

int cmd_report(const std::vector<std::string>& args, runtime::MpiEnv& env) {
  std::string help;
  ReportOptions o = runtime::parse_on_every_rank([&] { return parse_report(args, &help); });
  if (o.common.wants_help()) return print_help(help, env);
  if (env.rank() != 0) return 0;
  std::vector<std::string> notes;
  std::vector<report::RunData> runs;
  const auto labels = report::run_labels(o.metrics);
  for (size_t i = 0; i < o.metrics.size(); ++i) {
    runs.push_back(report::parse_metrics(report::read_text(o.metrics[i]), o.metrics[i], notes));
    runs.back().label = labels[i];
  }
  std::vector<report::RunStats> stats;
  for (const auto& r : runs) stats.push_back(report::run_stats(r));
  const fs::path dir = report::make_out_dir(o.out_dir);
  draw(dir / "loss.png", report::loss_chart(runs, o.smooth, o.title));
  draw(dir / "throughput.png", report::throughput_chart(runs, o.title));
  draw(dir / "breakdown.png", report::breakdown_chart(runs, stats, o.title));
  const std::string md = report::report_markdown(stats, o.title, notes);
  report::write_text(dir / "summary.md", md);
  std::cout << md << "\nwrote " << (dir / "summary.md").string()
            << ", loss.png, throughput.png and breakdown.png" << std::endl;
  return 0;
}

}  // namespace shardtrain::cli
