// One training run's per-step metrics (docs/metrics.md) reduced to charts and a summary: loss,
// throughput, the step-time breakdown by phase and the spread across ranks. Pure functions over
// the JSONL text; `shardtrain report` does the I/O.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "shardtrain/report/chart.h"

namespace shardtrain::report {

// The phases of a step, in the order they happen (the "phases" object of a metrics line):
// shardtrain::phase_name() of each Phase.
const std::vector<std::string>& phase_names();

struct Spread {  // one phase over all ranks, in seconds
  double min = 0, median = 0, max = 0;
};

// One metrics line, the fields the report uses. Numbers a line lacks (or holds as null) are NaN.
struct StepRecord {
  int64_t step = 0;
  double loss, tokens_per_s, mfu, step_time_s, val_loss;
  std::map<std::string, double> phases;        // this rank's seconds per phase
  std::map<std::string, Spread> across_ranks;  // phases_across_ranks
  int straggler_rank = -1;                     // -1: no "straggler" on this line
  std::string straggler_host;
  double straggler_step_s, straggler_busy_s, median_busy_s;  // the straggler's numbers
  StepRecord();
};

struct RunData {
  std::string source, label;      // the file; its name in legends and tables
  std::vector<StepRecord> steps;  // step >= 1 only, by step; a repeated step keeps its last line
  size_t ignored_lines = 0;       // JSON lines without a step >= 1 (validation-only step 0, events)
};

// Parses a metrics file's text. A line that is not JSON throws UsageError naming the source and
// the line, except a last line cut short by a killed job, which is dropped with a note. Throws
// UsageError when no line has a step >= 1.
RunData parse_metrics(const std::string& text, const std::string& source,
                      std::vector<std::string>& notes);

// Legend names: each file's parent directory, or the file stems when two parents share a name,
// or parent/stem when stems clash too; any name still repeated gets " #2", " #3", ...
std::vector<std::string> run_labels(const std::vector<std::string>& paths);

// Trailing mean over the last k points (fewer at the start), NaNs skipped; a NaN point stays
// NaN. k <= 1 returns y unchanged.
std::vector<double> moving_average(const std::vector<double>& y, int k);

// The slowest rank against the median rank for a step with cross-rank data. Busy time (the step
// minus exposed_comm, which the straggler's peers spend waiting for it) when the "straggler" object
// has busy_s and median_busy_s; else step time: a "step" entry of phases_across_ranks, or the
// straggler's step_time_s (else the sum of phase maxima) against the sum of phase medians.
struct RankSpread {
  double slowest, median;  // seconds; NaN without cross-rank data
  bool busy = false;
};
RankSpread rank_spread(const StepRecord& s);

struct PhaseStat {
  std::string phase;
  double median_s = 0, share = 0;  // share: median_s / the run's median step_time_s
};

struct RunStats {
  std::string label, source;
  size_t steps = 0;
  int64_t first_step = 0, last_step = 0;
  double final_loss = 0, final_val_loss = 0;          // of the last step that has one; NaN if none
  double tokens_per_s = 0, mfu = 0, step_time_s = 0;  // medians over all steps; NaN if none
  std::vector<PhaseStat>
      phases;                // phases present in the file: phase_names() order, then others by name
  size_t spread_steps = 0;   // steps with cross-rank data
  bool spread_busy = false;  // the ratios are of busy time (else of step time)
  double spread_ratio = 0, worst_ratio = 0;  // median and max of slowest/median; NaN if none
  int64_t worst_step = 0;
  int straggler_rank = -1;  // the rank named slowest most often (lowest rank on a tie)
  std::string straggler_host;
  size_t straggler_count = 0, straggler_steps = 0;  // steps it was slowest; steps naming one
};

RunStats run_stats(const RunData& run);  // medians: shardtrain::median (runtime/stats.h)
std::string report_markdown(const std::vector<RunStats>& runs, const std::string& title,
                            const std::vector<std::string>& notes);

// Charts (src/report/run_charts.cpp). Titles start with "title: " when a title is given.
struct ChartSpec {
  std::vector<Panel> panels;
  int columns = 1, panel_w = 640, panel_h = 400;
};
// Train loss per step for each run (with a trailing mean over `smooth` steps when > 1) and
// validation loss as markers.
ChartSpec loss_chart(const std::vector<RunData>& runs, int smooth, const std::string& title);
// Tokens/s and MFU (%) against step, one line per run.
ChartSpec throughput_chart(const std::vector<RunData>& runs, const std::string& title);
// Per run: each phase's seconds against step; when any run has cross-rank data, a second column
// with the max and median step time over ranks. Rare spikes (checkpoints, warmup) are cut off
// at the top and named in the legend so that the steady state stays readable. stats[i] is
// run_stats(runs[i]); throws runtime::Error when the sizes differ.
ChartSpec breakdown_chart(const std::vector<RunData>& runs, const std::vector<RunStats>& stats,
                          const std::string& title);

}  // namespace shardtrain::report
