#include "shardtrain/train/held_points.h"

#include <cstring>

namespace shardtrain::train {
namespace {

// Bitwise, so a NaN that stays NaN is held like any other value.
bool same(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

}  // namespace

void HeldPoints::add(int64_t step, int64_t time_ms, const std::vector<MetricScalar>& scalars,
                     std::vector<obs::MlflowMetric>& out) {
  for (const auto& s : scalars) {
    auto it = series_.find(s.tag);
    if (it == series_.end()) {
      series_.emplace(s.tag, Series{s.value, step, time_ms, true});
      out.push_back({s.tag, s.value, time_ms, step});
      continue;
    }
    Series& h = it->second;
    const bool changed = !same(h.value, s.value);
    if (changed && !h.sent)
      out.push_back({s.tag, h.value, h.time_ms, h.step});  // where the old value ends
    if (changed) out.push_back({s.tag, s.value, time_ms, step});
    h = Series{s.value, step, time_ms, changed};
  }
}

void HeldPoints::flush(std::vector<obs::MlflowMetric>& out) {
  for (auto& [tag, h] : series_) {
    if (h.sent) continue;
    out.push_back({tag, h.value, h.time_ms, h.step});
    h.sent = true;
  }
}

}  // namespace shardtrain::train
