#include "shardtrain/comm/bus_bandwidth.h"

#include <algorithm>

#include "shardtrain/runtime/error.h"

namespace shardtrain::comm {

double bus_factor(Op op, int ranks) {
  const double n = std::max(1, ranks);
  switch (op) {
    case Op::kAllReduce:
      return 2.0 * (n - 1) / n;
    case Op::kAllGather:
    case Op::kReduceScatter:
      return (n - 1) / n;
    default:
      return 1.0;
  }
}

std::vector<int64_t> sweep_sizes(int64_t min_bytes, int64_t max_bytes, int factor) {
  if (min_bytes <= 0 || max_bytes < min_bytes || factor < 2)
    throw runtime::UsageError(
        "sweep sizes need 0 < --min-bytes <= --max-bytes and --step-factor >= 2");
  std::vector<int64_t> out;
  for (int64_t b = min_bytes; b <= max_bytes; b *= factor) {
    out.push_back(b);
    if (b > max_bytes / factor) break;  // the next step would overflow or pass max
  }
  return out;
}

int64_t sweep_elements(int64_t bytes, int elem_bytes, int ranks) {
  const int64_t n = std::max<int64_t>(1, ranks);
  return std::max<int64_t>(n, bytes / elem_bytes / n * n);
}

}  // namespace shardtrain::comm
