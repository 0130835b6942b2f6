// Which samples each rank reads at each step: pure functions, so the data order is the same
// at any world size and can be checked without running anything distributed.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

namespace shardtrain::data {

// Deterministic Fisher-Yates permutation from (seed, epoch), identical on every platform.
std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch);

// Steps in an epoch of n samples: the last global batch may be short unless drop_last.
int64_t steps_per_epoch(int64_t n, int64_t global_batch, bool drop_last);

// [begin, end) of part `index` when `count` items are split into `parts` contiguous parts
// whose sizes differ by at most one (the first count % parts parts are one larger).
std::pair<int64_t, int64_t> balanced_part(int64_t count, int64_t parts, int64_t index);

// The sample indices of global batch `step` of an epoch, given that epoch's order.
std::vector<int64_t> global_batch(const std::vector<int64_t>& order, int64_t global_batch_size, int64_t step);

// This rank's share of a global batch, cut into grad_accum micro-batches (some may be empty
// when a short final batch has fewer samples than ranks × micro-steps).
std::vector<std::vector<int64_t>> rank_micro_batches(const std::vector<int64_t>& batch, int rank, int world,
                                                     int64_t grad_accum);

}  // namespace shardtrain::data
