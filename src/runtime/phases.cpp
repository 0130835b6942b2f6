#include "shardtrain/runtime/phases.h"

#include <algorithm>

#include "shardtrain/runtime/stats.h"

namespace shardtrain::runtime {

const char* phase_name(Phase p) {
  static const char* names[kNumPhases] = {"data_wait", "forward",      "backward",
                                          "optimizer", "exposed_comm", "checkpoint"};
  return names[static_cast<int>(p)];
}

double PhaseTimes::total() const {
  double t = 0;
  for (double v : s) t += v;
  return t;
}

PhaseSummary summarize_phases(const std::vector<PhaseTimes>& per_rank) {
  PhaseSummary out;
  if (per_rank.empty()) return out;
  for (int p = 0; p < kNumPhases; ++p) {
    std::vector<double> v;
    for (const auto& r : per_rank) v.push_back(r.s[p]);
    out.min[p] = *std::min_element(v.begin(), v.end());
    out.max[p] = *std::max_element(v.begin(), v.end());
    out.median[p] = median(v);
  }
  std::vector<double> busy;
  for (size_t r = 0; r < per_rank.size(); ++r) {
    busy.push_back(per_rank[r].busy());
    if (busy.back() > busy[out.straggler])
      out.straggler = static_cast<int>(r);  // first rank on ties
  }
  out.straggler_busy_s = busy[out.straggler];
  out.median_busy_s = median(busy);
  return out;
}

}  // namespace shardtrain::runtime
