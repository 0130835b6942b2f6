// The charts of `shardtrain report`: loss, throughput and the step-time breakdown (run_report.h).
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "shardtrain/report/run_report.h"
#include "shardtrain/runtime/error.h"
#include "shardtrain/runtime/stats.h"

namespace shardtrain::report {
namespace {

constexpr uint32_t kGrey = 0x7f7f7f;

std::string prefixed(const std::string& title, const std::string& what) {
  return title.empty() ? what : title + ": " + what;
}

std::string seconds(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, v >= 100 ? "%.0f s" : v >= 1 ? "%.1f s" : "%.3g s", v);
  return buf;
}

// Blends a colour toward white so the raw line sits behind its bold moving average.
uint32_t lighten(uint32_t c, double t) {
  uint32_t out = 0;
  for (int shift : {16, 8, 0}) {
    const double v = (c >> shift) & 0xff;
    out |= static_cast<uint32_t>(std::lround(v + (255 - v) * t)) << shift;
  }
  return out;
}

// x = step, y = value(step) for the steps where the value is finite: lines join measured steps.
template <typename F>
Series series_of(const RunData& run, const std::string& name, uint32_t color, F value) {
  Series s{name, {}, {}, color, false, false};
  for (const auto& r : run.steps)
    if (const double v = value(r); std::isfinite(v)) {
      s.x.push_back(static_cast<double>(r.step));
      s.y.push_back(v);
    }
  return s;
}

// Fixes the top of the y axis at the larger of `headroom` x the highest series median and 1.25x
// the highest 90th percentile, so rare spikes (checkpoints, warmup) do not flatten the steady
// state and the legend has room above it. A series cut off names its peak in the legend.
void cap_spikes(Panel& p, double headroom) {
  double cap = 0;
  for (const auto& s : p.series)
    cap =
        std::max({cap, headroom * runtime::quantile(s.y, 0.5), 1.25 * runtime::quantile(s.y, 0.9)});
  if (!(cap > 0)) return;  // no data, or all zero: the axis follows the data
  p.ymax = cap;
  for (auto& s : p.series) {
    double peak = 0;
    int64_t at = 0;
    for (size_t i = 0; i < std::min(s.x.size(), s.y.size()); ++i)
      if (s.y[i] > peak) {
        peak = s.y[i];
        at = static_cast<int64_t>(s.x[i]);
      }
    if (peak > cap && !s.name.empty())
      s.name += " (off scale: " + seconds(peak) + " at step " + std::to_string(at) + ")";
  }
}

Panel phase_panel(const RunData& run, const std::string& title, const RunStats& stats) {
  Panel p{prefixed(title, run.label + ": step time by phase"),
          "step",
          "seconds",
          {},
          0.0,
          std::nullopt,
          false};
  if (stats.phases.empty())
    p.title = prefixed(title, run.label + ": step time (no per-phase timings in this file)");
  p.series.push_back(
      series_of(run, "step total", kGrey, [](const StepRecord& r) { return r.step_time_s; }));
  p.series.back().dashed = true;
  const auto& known = phase_names();
  size_t extra = 0;
  for (const PhaseStat& phase : stats.phases) {  // the phases the run reports, in their usual order
    const std::string& name = phase.phase;
    const size_t k = std::find(known.begin(), known.end(), name) - known.begin();
    const uint32_t color =
        palette_color(k < known.size() ? k : 8 + extra++);  // a phase keeps its colour; 7 is grey
    p.series.push_back(series_of(run, name, color, [&](const StepRecord& r) {
      const auto it = r.phases.find(name);
      return it == r.phases.end() ? std::nan("") : it->second;
    }));
    p.series.back().markers =
        p.series.back().x.size() <= 40;  // sparse steps: show where they were measured
  }
  cap_spikes(p, 2.0);
  return p;
}

Panel spread_panel(const RunData& run, const std::string& title, const RunStats& stats) {
  const std::string what = stats.spread_busy ? ": busy time across ranks (step - exposed_comm)"
                                             : ": step time across ranks";
  Panel p{prefixed(title, run.label + what), "step", "seconds", {}, 0.0, std::nullopt, false};
  if (stats.spread_steps == 0) {
    p.title = prefixed(title, run.label + ": no phases_across_ranks in this file");
    return p;
  }
  if (stats.straggler_rank >= 0)
    p.xlabel = "step   (slowest most often: rank " + std::to_string(stats.straggler_rank) +
               (stats.straggler_host.empty() ? "" : " on " + stats.straggler_host) + ", " +
               std::to_string(stats.straggler_count) + " of " +
               std::to_string(stats.straggler_steps) + " steps)";
  Series slow = series_of(run, "slowest rank", palette_color(3),
                          [](const StepRecord& r) { return rank_spread(r).slowest; });
  Series med = series_of(run, "median rank", palette_color(0),
                         [](const StepRecord& r) { return rank_spread(r).median; });
  med.markers = slow.x.size() <= 40;
  slow.markers = med.markers;
  p.series = {med, slow};   // the slowest drawn on top
  if (stats.spread_busy) {  // with the step time for scale: what even the slowest rank waits on
    Series step = series_of(run, "step time", kGrey, [](const StepRecord& r) {
      return std::isfinite(rank_spread(r).slowest) ? r.step_time_s : std::nan("");
    });
    step.dashed = true;
    p.series.insert(p.series.begin(), step);
  }
  cap_spikes(p, 1.8);
  return p;
}

}  // namespace

ChartSpec loss_chart(const std::vector<RunData>& runs, int smooth, const std::string& title) {
  const bool smoothing = smooth > 1;
  Panel p{prefixed(title, smoothing ? "loss (faint: per step; bold: mean of the last " +
                                          std::to_string(smooth) + " steps)"
                                    : "loss"),
          "step",
          "loss",
          {},
          std::nullopt,
          std::nullopt,
          false,
          0.0};                          // a loss is never negative
  std::vector<Series> faint, bold, val;  // drawn in that order, so no raw line hides an average
  for (size_t i = 0; i < runs.size(); ++i) {
    const uint32_t color = palette_color(i);
    Series train = series_of(runs[i], runs[i].label + " train", color,
                             [](const StepRecord& r) { return r.loss; });
    if (smoothing) {
      Series avg = train;
      avg.y = moving_average(train.y, smooth);
      train.name.clear();
      train.color = lighten(color, 0.6);
      faint.push_back(train);
      bold.push_back(avg);
    } else {
      bold.push_back(train);
    }
    Series v = series_of(runs[i], runs[i].label + " val", color,
                         [](const StepRecord& r) { return r.val_loss; });
    v.dashed = true;
    v.markers = v.dashed;
    if (!v.x.empty()) val.push_back(v);
  }
  for (auto* group : {&faint, &bold, &val})
    p.series.insert(p.series.end(), group->begin(), group->end());
  return {{p}, 1, 960, 480};
}

ChartSpec throughput_chart(const std::vector<RunData>& runs, const std::string& title) {
  Panel tps{prefixed(title, "throughput"), "step", "tokens/s", {}, 0.0, std::nullopt, false};
  Panel mfu{
      prefixed(title, "model FLOPs utilization"), "step", "MFU (%)", {}, 0.0, std::nullopt, false};
  for (size_t i = 0; i < runs.size(); ++i) {
    tps.series.push_back(series_of(runs[i], runs[i].label, palette_color(i),
                                   [](const StepRecord& r) { return r.tokens_per_s; }));
    mfu.series.push_back(series_of(runs[i], runs[i].label, palette_color(i),
                                   [](const StepRecord& r) { return 100 * r.mfu; }));
  }
  return {{tps, mfu}, 2, 640, 400};
}

ChartSpec breakdown_chart(const std::vector<RunData>& runs, const std::vector<RunStats>& stats,
                          const std::string& title) {
  if (stats.size() != runs.size())
    throw runtime::Error("breakdown_chart: " + std::to_string(stats.size()) + " RunStats for " +
                         std::to_string(runs.size()) + " runs");
  const bool spread =
      std::any_of(stats.begin(), stats.end(), [](const RunStats& s) { return s.spread_steps > 0; });
  ChartSpec spec;
  for (size_t i = 0; i < runs.size(); ++i) {
    spec.panels.push_back(phase_panel(runs[i], title, stats[i]));
    if (spread) spec.panels.push_back(spread_panel(runs[i], title, stats[i]));  // one row per run
  }
  spec.columns = spread ? 2 : std::min<int>(2, static_cast<int>(runs.size()));
  spec.columns = std::max(spec.columns, 1);
  return spec;
}

}  // namespace shardtrain::report
