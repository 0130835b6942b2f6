// Order statistics over a sample, shared by the cross-rank phase summary and the reports.
// Non-finite values (NaN, which metrics use for "not measured", and +-inf) are left out of both;
// a sample with no finite value gives NaN.
#pragma once
#include <algorithm>
#include <cmath>
#include <vector>

namespace shardtrain::runtime {

// The middle finite value, or the mean of the two middle ones for an even count.
inline double median(std::vector<double> values) {
  values.erase(
      std::remove_if(values.begin(), values.end(), [](double v) { return !std::isfinite(v); }),
      values.end());
  if (values.empty()) return std::nan("");
  const size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + mid, values.end());
  if (values.size() % 2) return values[mid];
  const double upper = values[mid];
  return (upper + *std::max_element(values.begin(), values.begin() + mid)) / 2;
}

// Nearest-rank quantile of the finite values: the smallest value with at least q of them at or
// below it (q clamped to [0, 1]; q = 0 gives the minimum). Always one of the values, so
// quantile(v, 0.5) is the lower middle value where median() would average two.
inline double quantile(std::vector<double> values, double q) {
  values.erase(
      std::remove_if(values.begin(), values.end(), [](double v) { return !std::isfinite(v); }),
      values.end());
  if (values.empty()) return std::nan("");
  const double rank = std::ceil(std::clamp(q, 0.0, 1.0) * static_cast<double>(values.size()));
  const size_t k = static_cast<size_t>(std::max(rank, 1.0)) - 1;
  std::nth_element(values.begin(), values.begin() + k, values.end());
  return values[k];
}

}  // namespace shardtrain::runtime
