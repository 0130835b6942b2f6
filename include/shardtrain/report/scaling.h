// Multi-node scaling from per-step metrics (docs/metrics.md): the median throughput of each run,
// compared with the run on the fewest nodes. Pure functions; `shardtrain scaling` does the I/O.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "shardtrain/report/chart.h"

namespace shardtrain::report {

// One run's measured steps, in file order: tokens_per_s, and mfu (NaN where a line has none).
struct RunSteps {
  int nodes = 0;
  std::string source;  // the metrics file, for messages
  std::vector<double> tokens_per_s, mfu;
};

// A run reduced to medians (shardtrain::median, runtime/stats.h) over the steps after the first
// skip_steps.
struct RunSummary {
  int nodes = 0;
  std::string source;
  size_t steps = 0, used = 0;        // measured steps in the file; steps the medians are over
  bool kept_warmup = false;          // steps <= skip_steps, so every step was used
  double tokens_per_s = 0, mfu = 0;  // mfu is NaN when no used step has one
};

struct ScalingRow {
  int nodes = 0;
  double tokens_per_s = 0, tokens_per_s_per_node = 0;
  double speedup = 0;     // tokens_per_s / tokens_per_s of the fewest-nodes run
  double efficiency = 0;  // (tokens_per_s / nodes) / (baseline tokens_per_s / baseline nodes)
  double mfu = 0;         // median, NaN when unknown
  size_t steps_used = 0;
};

RunSummary summarize_run(const RunSteps& run, int skip_steps);
// Rows sorted by node count. Throws runtime::UsageError for two runs with the same node count
// or a non-positive node count or throughput.
std::vector<ScalingRow> scaling_rows(const std::vector<RunSummary>& runs);

std::string scaling_markdown(const std::vector<ScalingRow>& rows, const std::string& title,
                             const std::vector<std::string>& notes);
std::string scaling_csv(const std::vector<ScalingRow>& rows);
// Two panels: throughput vs nodes with ideal-linear, and scaling efficiency (%) with 100%.
std::vector<Panel> scaling_panels(const std::vector<ScalingRow>& rows, const std::string& title);

}  // namespace shardtrain::report
