// Number formatting shared by the report tables (scaling.cpp, run_report.cpp); internal to
// src/report. A value that is not finite prints as "n/a".
#pragma once
#include <cmath>
#include <cstdio>
#include <string>

namespace shardtrain::report {

// printf-style, one double; no n/a check (for values known to be finite, or where "nan" is wanted).
inline std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

inline std::string fmt_or_na(const char* format, double v) {
  return std::isfinite(v) ? fmt(format, v) : "n/a";
}

// Throughput with as many decimals as a value of its size needs to be read at a glance.
inline std::string fmt_rate(double v) {
  return fmt_or_na(v >= 100 ? "%.0f" : v >= 10 ? "%.1f" : "%.2f", v);
}

inline std::string fmt_percent(double fraction) {
  return std::isfinite(fraction) ? fmt("%.1f%%", 100 * fraction) : "n/a";
}

}  // namespace shardtrain::report
