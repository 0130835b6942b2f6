// The training data loader: each step's global batch is fixed by (seed, epoch, step) alone, so
// 1 rank and N ranks train on the same data; each rank reads only its own rows, and the next
// step is read on a background thread while this one computes.
#pragma once
#include <cstdint>
#include <future>
#include <vector>

#include "shardtrain/data/token_file.h"

namespace shardtrain::data {

struct LoaderConfig {
  int64_t micro_batch = 8;  // rows per micro-batch per rank
  int64_t grad_accum = 1;
  int rank = 0, world = 1;  // data-parallel position
  uint64_t seed = 1234;
  bool shuffle = true, drop_last = false, prefetch = true;
};

// Where the loader is: the next step it will return. Saved in checkpoints for exact resume.
struct LoaderState {
  int64_t epoch = 0, step = 0;
  bool operator==(const LoaderState& o) const { return epoch == o.epoch && step == o.step; }
};

struct StepData {
  LoaderState position;        // which step this is
  std::vector<model::Batch> micro;    // [grad_accum] this rank's micro-batches (some may have 0 rows)
  std::vector<int64_t> rows;   // this rank's row indices, micro-batches concatenated
  int64_t global_rows = 0;     // rows in the global batch (all ranks) at this step
  std::vector<int64_t> batch_rows;  // the global batch's row indices, for messages that name them
};

class DataLoader {
 public:
  DataLoader(const TokenFile& file, LoaderConfig cfg);  // throws UsageError on a bad size
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  StepData next();
  LoaderState state() const { return pos_; }
  void restore(LoaderState s);  // discards any prefetched step

  int64_t global_batch() const { return cfg_.micro_batch * cfg_.grad_accum * cfg_.world; }
  int64_t steps_per_epoch() const;

 private:
  // load() and the epoch-order cache it uses run on the prefetch thread or, with no prefetch
  // in flight, on the caller's; next(), restore() and the destructor join any prefetch before
  // starting another, so at most one load() runs at a time and the cache needs no lock.
  StepData load(LoaderState s);
  LoaderState after(LoaderState s) const;
  const std::vector<int64_t>& order(int64_t epoch);
  // The global batch (all ranks) at a position; what every rank's next() is a slice of.
  std::vector<int64_t> global_rows(LoaderState s);

  const TokenFile* file_;
  LoaderConfig cfg_;
  LoaderState pos_;
  std::future<StepData> pending_;  // the prefetched step at pos_, when valid
  int64_t order_epoch_ = -1;       // the epoch order_ holds, -1 before the first load
  std::vector<int64_t> order_;
};

}  // namespace shardtrain::data
