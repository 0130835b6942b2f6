// nccl-tests' bandwidth arithmetic, so preflight numbers read like nccl-tests' output:
// algbw = size / time, busbw = algbw * factor, where the factor scales each collective to what
// the slowest link carries (nccl-tests doc/PERFORMANCE.md). size is the unsharded buffer.
#pragma once
#include <cstdint>
#include <vector>

#include "shardtrain/comm/communicator.h"

namespace shardtrain::comm {

double bus_factor(Op op,
                  int ranks);  // all-reduce 2(n-1)/n; all-gather, reduce-scatter (n-1)/n; else 1

// min, min*factor, ... up to max inclusive (1 MiB .. 1 GiB by 2 as nccl-tests -b 1M -e 1G -f 2).
std::vector<int64_t> sweep_sizes(int64_t min_bytes, int64_t max_bytes, int factor);

// Elements of `elem_bytes` in the full buffer for a requested size: rounded down to a multiple
// of `ranks` so every rank's share is equal, and at least one element per rank.
int64_t sweep_elements(int64_t bytes, int elem_bytes, int ranks);

}  // namespace shardtrain::comm
