#include "shardtrain/report/run_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "format.h"
#include "shardtrain/runtime/error.h"
#include "shardtrain/runtime/phases.h"
#include "shardtrain/runtime/stats.h"

namespace fs = std::filesystem;

namespace shardtrain::report {
namespace {

const double kNaN = std::nan("");

double num(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>()
                                          : kNaN;  // null (a NaN written by json) too
}

// Seconds with 4 significant digits and never an exponent: 0.0000551 reads better than 5.51e-05.
std::string fmt_seconds(double v) {
  if (!std::isfinite(v)) return "n/a";
  if (v == 0 || std::abs(v) >= 1000) return fmt("%.0f", v);
  if (std::abs(v) >= 0.001) return fmt("%.4g", v);
  const int decimals = 3 - static_cast<int>(std::floor(std::log10(std::abs(v))));
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  std::string s = buf;
  s.erase(s.find_last_not_of('0') + 1);
  return s;
}

StepRecord to_record(const nlohmann::json& j) {
  StepRecord r;
  r.step = static_cast<int64_t>(num(j, "step"));
  r.loss = num(j, "loss");
  r.tokens_per_s = num(j, "tokens_per_s");
  r.mfu = num(j, "mfu");
  r.step_time_s = num(j, "step_time_s");
  r.val_loss = num(j, "val_loss");
  if (const auto p = j.find("phases"); p != j.end() && p->is_object())
    for (const auto& [name, v] : p->items())
      if (v.is_number()) r.phases[name] = v.get<double>();
  if (const auto p = j.find("phases_across_ranks"); p != j.end() && p->is_object())
    for (const auto& [name, v] : p->items())
      if (v.is_object()) {
        const Spread s{num(v, "min"), num(v, "median"), num(v, "max")};
        if (std::isfinite(s.median) && std::isfinite(s.max)) r.across_ranks[name] = s;
      }
  if (const auto s = j.find("straggler");
      s != j.end() && s->is_object() && std::isfinite(num(*s, "rank"))) {
    r.straggler_rank = static_cast<int>(num(*s, "rank"));
    r.straggler_host = s->value("host", std::string());
    r.straggler_step_s = num(*s, "step_time_s");
    r.straggler_busy_s = num(*s, "busy_s");
    r.median_busy_s = num(*s, "median_busy_s");
  }
  return r;
}

}  // namespace

const std::vector<std::string>& phase_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (int p = 0; p < runtime::kNumPhases; ++p)
      out.push_back(runtime::phase_name(static_cast<runtime::Phase>(p)));
    return out;
  }();
  return names;
}

StepRecord::StepRecord()
    : loss(kNaN),
      tokens_per_s(kNaN),
      mfu(kNaN),
      step_time_s(kNaN),
      val_loss(kNaN),
      straggler_step_s(kNaN),
      straggler_busy_s(kNaN),
      median_busy_s(kNaN) {}

RunData parse_metrics(const std::string& text, const std::string& source,
                      std::vector<std::string>& notes) {
  RunData run;
  run.source = source;
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.find_first_not_of(" \t\r") != std::string::npos) lines.push_back(line);
  std::map<int64_t, StepRecord> by_step;  // a resumed run may repeat steps: the last line wins
  for (size_t i = 0; i < lines.size(); ++i) {
    const auto j = nlohmann::json::parse(lines[i], nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) {
      if (i + 1 == lines.size() && i > 0) {
        notes.push_back(source +
                        ": ignored its last line, which is not complete JSON (a write cut short)");
        break;
      }
      throw runtime::UsageError(source + ": line " + std::to_string(i + 1) +
                                " is not JSON; pass the JSONL that train --metrics-file wrote");
    }
    const double step = j.is_object() ? num(j, "step") : kNaN;
    if (!(step >= 1)) {
      ++run.ignored_lines;
      continue;
    }
    StepRecord r = to_record(j);
    by_step[r.step] = std::move(r);
  }
  if (by_step.empty())
    throw runtime::UsageError(
        source +
        ": no line has a \"step\" of 1 or more; pass the JSONL that train --metrics-file wrote");
  for (auto& [step, r] : by_step) run.steps.push_back(std::move(r));
  return run;
}

std::vector<std::string> run_labels(const std::vector<std::string>& paths) {
  auto unique = [](const std::vector<std::string>& v) {
    return std::set<std::string>(v.begin(), v.end()).size() == v.size();
  };
  std::vector<std::string> parents, stems, both;
  for (const auto& p : paths) {
    const fs::path abs = fs::absolute(p).lexically_normal();
    std::string parent = abs.parent_path().filename().string();
    if (parent.empty()) parent = abs.stem().string();  // a file at the root
    parents.push_back(parent);
    stems.push_back(abs.stem().string());
    both.push_back(parent + "/" + stems.back());
  }
  std::vector<std::string> labels = unique(parents) ? parents : unique(stems) ? stems : both;
  std::map<std::string, int> seen;
  for (auto& l : labels)
    if (const int n = ++seen[l]; n > 1) l += " #" + std::to_string(n);  // the same file given twice
  return labels;
}

std::vector<double> moving_average(const std::vector<double>& y, int k) {
  if (k <= 1) return y;
  std::vector<double> out(y.size(), kNaN);
  for (size_t i = 0; i < y.size(); ++i) {
    if (!std::isfinite(y[i])) continue;
    double sum = 0;
    int n = 0;
    for (size_t j = i + 1 - std::min(i + 1, static_cast<size_t>(k)); j <= i; ++j)
      if (std::isfinite(y[j])) {
        sum += y[j];
        ++n;
      }
    out[i] = sum / n;
  }
  return out;
}

RankSpread rank_spread(const StepRecord& s) {
  if (std::isfinite(s.straggler_busy_s) && std::isfinite(s.median_busy_s))
    return {s.straggler_busy_s, s.median_busy_s, true};
  if (const auto it = s.across_ranks.find("step"); it != s.across_ranks.end())
    return {it->second.max, it->second.median, false};
  if (s.across_ranks.empty()) return {kNaN, kNaN, false};
  double max_sum = 0, median_sum = 0;
  for (const auto& [name, spread] : s.across_ranks) {
    max_sum += spread.max;
    median_sum += spread.median;
  }
  return {std::isfinite(s.straggler_step_s) ? s.straggler_step_s : max_sum, median_sum, false};
}

RunStats run_stats(const RunData& run) {
  RunStats s;
  s.label = run.label;
  s.source = run.source;
  s.steps = run.steps.size();
  s.worst_ratio = kNaN;
  s.spread_ratio = s.worst_ratio;
  s.final_val_loss = s.worst_ratio;
  s.final_loss = s.worst_ratio;
  if (run.steps.empty()) return s;
  s.first_step = run.steps.front().step;
  s.last_step = run.steps.back().step;
  std::vector<double> tps, mfu, step_s, ratios;
  std::map<std::string, std::vector<double>> phases;
  std::map<int, std::pair<size_t, std::string>> slowest;  // rank -> (steps, host)
  for (const auto& r : run.steps) {
    if (std::isfinite(r.loss)) s.final_loss = r.loss;
    if (std::isfinite(r.val_loss)) s.final_val_loss = r.val_loss;
    tps.push_back(r.tokens_per_s);
    mfu.push_back(r.mfu);
    step_s.push_back(r.step_time_s);
    for (const auto& [name, v] : r.phases) phases[name].push_back(v);
    const RankSpread spread = rank_spread(r);
    if (std::isfinite(spread.slowest) && spread.median > 0) {
      ++s.spread_steps;
      s.spread_busy = spread.busy;
      ratios.push_back(spread.slowest / spread.median);
      if (!(ratios.back() <= s.worst_ratio)) {
        s.worst_ratio = ratios.back();
        s.worst_step = r.step;
      }
    }
    if (r.straggler_rank >= 0) {
      ++s.straggler_steps;
      auto& [count, host] = slowest[r.straggler_rank];
      ++count;
      host = r.straggler_host;
    }
  }
  s.tokens_per_s = runtime::median(tps);
  s.mfu = runtime::median(mfu);
  s.step_time_s = runtime::median(step_s);
  s.spread_ratio = runtime::median(ratios);
  for (const auto& [rank, entry] : slowest)  // std::map order: the lowest rank wins a tie
    if (entry.first > s.straggler_count) {
      s.straggler_rank = rank;
      s.straggler_count = entry.first;
      s.straggler_host = entry.second;
    }
  std::vector<std::string> order = phase_names();
  for (const auto& [name, v] : phases)
    if (std::find(order.begin(), order.end(), name) == order.end()) order.push_back(name);
  for (const auto& name : order)
    if (const auto it = phases.find(name); it != phases.end()) {
      const double m = runtime::median(it->second);
      s.phases.push_back({name, m, s.step_time_s > 0 ? m / s.step_time_s : kNaN});
    }
  return s;
}

std::string report_markdown(const std::vector<RunStats>& runs, const std::string& title,
                            const std::vector<std::string>& notes) {
  std::ostringstream os;
  os << "# " << (title.empty() ? "Training report" : title) << "\n\n"
     << "| run | steps | final loss | final val loss | median tokens/s | median MFU | median step "
        "time (s) |\n"
     << "|---|---:|---:|---:|---:|---:|---:|\n";
  for (const auto& r : runs)
    os << "| " << r.label << " | " << r.steps << " | " << fmt_or_na("%.4f", r.final_loss) << " | "
       << fmt_or_na("%.4f", r.final_val_loss) << " | " << fmt_rate(r.tokens_per_s) << " | "
       << fmt_percent(r.mfu) << " | " << fmt_seconds(r.step_time_s) << " |\n";
  os << "\nMedians are over every step in the file (steps >= 1).\n\n"
     << "![loss](loss.png)\n\n![throughput](throughput.png)\n\n![step-time "
        "breakdown](breakdown.png)\n";
  for (const auto& r : runs) {
    os << "\n## " << r.label << "\n\n`" << r.source << "`: " << r.steps << " steps ("
       << r.first_step << " to " << r.last_step << ").\n";
    if (r.phases.empty()) {
      os << "\nNo per-phase timings (\"phases\") in this file.\n";
    } else {
      os << "\n| phase | median (s) | share of step |\n|---|---:|---:|\n";
      for (const auto& p : r.phases)
        os << "| " << p.phase << " | " << fmt_seconds(p.median_s) << " | " << fmt_percent(p.share)
           << " |\n";
      os << "| step (step_time_s) | " << fmt_seconds(r.step_time_s) << " | "
         << (std::isfinite(r.step_time_s) ? "100.0%" : "n/a") << " |\n"
         << "\nShare = the phase's median / the median step time, so shares need not add up to "
            "100%.\n";
    }
    if (r.spread_steps > 0)
      os << "\nAcross ranks (" << r.spread_steps
         << " steps with cross-rank timings): slowest/median "
         << (r.spread_busy ? "busy time (step minus exposed_comm) " : "step time ")
         << fmt("%.2fx", r.spread_ratio) << " at the median, " << fmt("%.2fx", r.worst_ratio)
         << " at worst (step " << r.worst_step << ").";
    if (r.straggler_rank >= 0)
      os << (r.spread_steps > 0 ? " " : "\n") << "Slowest rank most often: rank "
         << r.straggler_rank << (r.straggler_host.empty() ? "" : " (" + r.straggler_host + ")")
         << ", on " << r.straggler_count << " of " << r.straggler_steps << " steps that name one.";
    if (r.spread_steps > 0 || r.straggler_rank >= 0) os << "\n";
  }
  for (const auto& n : notes) os << "\nNote: " << n << "\n";
  return os.str();
}

}  // namespace shardtrain::report
