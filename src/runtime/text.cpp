#include "shardtrain/runtime/text.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace shardtrain::runtime {
namespace {

// "1e-08" -> "1e-8", "1e+20" -> "1e20": the exponent as one types it.
std::string plain_exponent(std::string s) {
  const size_t e = s.find('e');
  if (e == std::string::npos) return s;
  size_t digits = e + 1;
  if (s[digits] == '+') s.erase(digits, 1);
  if (s[digits] == '-') ++digits;
  while (digits + 1 < s.size() && s[digits] == '0') s.erase(digits, 1);
  return s;
}

}  // namespace

std::string round_trip(double v) {
  char buf[512];  // %f of 1e308 has 309 digits
  int digits = 1;
  for (; digits < 17; ++digits) {  // 17 significant digits always read back exactly
    std::snprintf(buf, sizeof buf, "%.*e", digits - 1, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  std::snprintf(buf, sizeof buf, "%.*e", digits - 1, v);
  const std::string exponent = plain_exponent(buf);
  std::string fixed;
  for (int decimals = 0; decimals <= 20 && fixed.empty(); ++decimals) {
    std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
    if (std::strtod(buf, nullptr) == v) fixed = buf;
  }
  if (fixed.empty()) return exponent;
  if (std::abs(v) >= 1 && std::abs(v) < 1e6) return fixed;   // 600, not 6e2
  return exponent.size() < fixed.size() ? exponent : fixed;  // 1e-4, not 0.0001; 0.5, not 5e-1
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min(
          {d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

}  // namespace shardtrain::runtime
