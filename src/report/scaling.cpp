#include "shardtrain/report/scaling.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "format.h"
#include "shardtrain/runtime/error.h"
#include "shardtrain/runtime/stats.h"

namespace shardtrain::report {
namespace {

bool power_of_two(int n) { return n > 0 && (n & (n - 1)) == 0; }

}  // namespace

RunSummary summarize_run(const RunSteps& run, int skip_steps) {
  RunSummary s;
  s.nodes = run.nodes;
  s.source = run.source;
  s.steps = run.tokens_per_s.size();
  const size_t skip = static_cast<size_t>(std::max(skip_steps, 0));
  s.kept_warmup = s.steps <= skip && skip > 0;
  const size_t first = s.kept_warmup ? 0 : skip;  // too few steps: the warmup ones are all there is
  const std::vector<double> tps(run.tokens_per_s.begin() + std::min(first, s.steps),
                                run.tokens_per_s.end());
  std::vector<double> mfu;
  for (size_t i = first; i < std::min(run.mfu.size(), s.steps); ++i) mfu.push_back(run.mfu[i]);
  s.used = tps.size();
  s.tokens_per_s = runtime::median(tps);
  s.mfu = runtime::median(mfu);
  return s;
}

std::vector<ScalingRow> scaling_rows(const std::vector<RunSummary>& runs) {
  std::vector<RunSummary> sorted = runs;
  std::sort(sorted.begin(), sorted.end(),
            [](const RunSummary& a, const RunSummary& b) { return a.nodes < b.nodes; });
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (sorted[i].nodes <= 0)
      throw runtime::UsageError("--run " + sorted[i].source + ": the node count must be 1 or more");
    if (!(sorted[i].tokens_per_s > 0) || !std::isfinite(sorted[i].tokens_per_s))
      throw runtime::UsageError("--run " + sorted[i].source +
                                ": its median tokens_per_s is not a positive number");
    if (i > 0 && sorted[i].nodes == sorted[i - 1].nodes)
      throw runtime::UsageError("--run: " + sorted[i - 1].source + " and " + sorted[i].source +
                                " are both for " + std::to_string(sorted[i].nodes) +
                                " nodes; pass one run per node count");
  }
  std::vector<ScalingRow> rows;
  if (sorted.empty()) return rows;
  const double base_per_node = sorted.front().tokens_per_s / sorted.front().nodes;
  for (const auto& r : sorted) {
    ScalingRow row;
    row.nodes = r.nodes;
    row.tokens_per_s = r.tokens_per_s;
    row.mfu = r.mfu;
    row.steps_used = r.used;
    row.tokens_per_s_per_node = r.tokens_per_s / r.nodes;
    row.speedup = r.tokens_per_s / sorted.front().tokens_per_s;
    row.efficiency = row.tokens_per_s_per_node / base_per_node;
    rows.push_back(row);
  }
  return rows;
}

std::string scaling_markdown(const std::vector<ScalingRow>& rows, const std::string& title,
                             const std::vector<std::string>& notes) {
  std::ostringstream os;
  os << "# " << (title.empty() ? "Scaling" : title) << "\n\n"
     << "| nodes | tokens/s | tokens/s per node | speedup | scaling efficiency | MFU | steps |\n"
     << "|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const auto& r : rows)
    os << "| " << r.nodes << " | " << fmt_rate(r.tokens_per_s) << " | "
       << fmt_rate(r.tokens_per_s_per_node) << " | " << fmt("%.2fx", r.speedup) << " | "
       << fmt_percent(r.efficiency) << " | " << fmt_percent(r.mfu) << " | " << r.steps_used
       << " |\n";
  if (!rows.empty())
    os << "\nScaling efficiency = (tokens/s / nodes) / (tokens/s / nodes at " << rows.front().nodes
       << (rows.front().nodes == 1 ? " node" : " nodes") << "); 100% is linear scaling. "
       << "Throughput and MFU are medians over the steps counted in the last column.\n";
  for (const auto& n : notes) os << "\nNote: " << n << "\n";
  return os.str();
}

std::string scaling_csv(const std::vector<ScalingRow>& rows) {
  std::ostringstream os;
  os << "nodes,tokens_per_s,tokens_per_s_per_node,speedup,scaling_efficiency,mfu,steps_used\n";
  for (const auto& r : rows)
    os << r.nodes << "," << fmt("%.6g", r.tokens_per_s) << ","
       << fmt("%.6g", r.tokens_per_s_per_node) << "," << fmt("%.6g", r.speedup) << ","
       << fmt("%.6g", r.efficiency) << "," << (std::isfinite(r.mfu) ? fmt("%.6g", r.mfu) : "")
       << "," << r.steps_used << "\n";
  return os.str();
}

std::vector<Panel> scaling_panels(const std::vector<ScalingRow>& rows, const std::string& title) {
  const std::string prefix = title.empty() ? "" : title + ": ";
  Panel tput{prefix + "throughput", "nodes", "tokens/s", {}, 0.0, std::nullopt, false};
  Panel eff{prefix + "scaling efficiency",
            "nodes",
            "scaling efficiency (%)",
            {},
            0.0,
            std::nullopt,
            false};
  Series measured{"measured", {}, {}, palette_color(0), false, true};
  Series ideal{"ideal (linear)", {}, {}, 0x7f7f7f, true, false};
  Series efficiency{"measured", {}, {}, palette_color(0), false, true};
  Series reference{"100% (linear)", {}, {}, 0x7f7f7f, true, false};
  bool all_pow2 = !rows.empty();
  for (const auto& r : rows) {
    all_pow2 = all_pow2 && power_of_two(r.nodes);
    measured.x.push_back(r.nodes);
    measured.y.push_back(r.tokens_per_s);
    ideal.x.push_back(r.nodes);
    ideal.y.push_back(rows.front().tokens_per_s * r.nodes / rows.front().nodes);
    efficiency.x.push_back(r.nodes);
    efficiency.y.push_back(100 * r.efficiency);
    reference.x.push_back(r.nodes);
    reference.y.push_back(100);
  }
  eff.log2_x = all_pow2;  // 1, 2, 4, 8 nodes spread evenly; other counts need a linear axis
  tput.log2_x = eff.log2_x;
  tput.series = {ideal, measured};  // measured drawn last, on top
  eff.series = {reference, efficiency};
  return {tput, eff};
}

}  // namespace shardtrain::report
