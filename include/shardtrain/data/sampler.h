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

// Where the data stream is: the epoch, and the rows of that epoch's order already consumed.
// Rows, not steps: a position means the same data at any global batch.
struct LoaderState {
  int64_t epoch = 0, row = 0;
  bool operator==(const LoaderState& o) const { return epoch == o.epoch && row == o.row; }
};

// The global batch that starts `row` rows into an epoch's order (short at the epoch's end).
std::vector<int64_t> global_batch(const std::vector<int64_t>& order, int64_t global_batch_size,
                                  int64_t row);

// The position after one step of global_batch_size rows: the next epoch once fewer rows are
// left than one more step takes (none; drop_last: fewer than a whole batch).
LoaderState next_position(LoaderState p, int64_t n, int64_t global_batch_size, bool drop_last);

// Training progress in rows, counted in steps of a reference global batch (the first run's):
// each epoch is steps_per_epoch(n, ref_batch) of them, so at the reference batch progress /
// ref_batch is the step count, and at any other batch it moves with the data consumed. The
// learning-rate schedule and --steps count it, so a resume at another global batch keeps both.
int64_t epoch_progress_rows(int64_t n, int64_t ref_batch, bool drop_last);
int64_t progress_rows(LoaderState p, int64_t n, int64_t ref_batch, bool drop_last);

// Steps of global_batch_size rows from `from` until progress_rows reaches total_rows.
int64_t steps_until(LoaderState from, int64_t total_rows, int64_t n, int64_t global_batch_size,
                    int64_t ref_batch, bool drop_last);

// This rank's share of a global batch, cut into grad_accum micro-batches (some may be empty
// when a short final batch has fewer samples than ranks × micro-steps).
std::vector<std::vector<int64_t>> rank_micro_batches(const std::vector<int64_t>& batch, int rank,
                                                     int world, int64_t grad_accum);

}  // namespace shardtrain::data
