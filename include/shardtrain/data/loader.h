// The training data loader: each step's global batch is fixed by (seed, epoch, rows consumed)
// alone, so 1 rank and N ranks train on the same data, and a resume at another global batch
// continues with the next unread row; each rank reads only its own rows, and the next step is
// read on a background thread while this one computes.
#pragma once
#include <cstdint>
#include <future>
#include <vector>

#include "shardtrain/data/sampler.h"
#include "shardtrain/data/token_file.h"

namespace shardtrain::data {

// A preference file's examples are its pairs (token_file.h rows_per_example): the sizes and
// positions below count pairs there, and each pair's two rows are read together.
struct LoaderConfig {
  int64_t micro_batch = 8;  // examples (rows, or pairs) per micro-batch per rank
  int64_t grad_accum = 1;
  int rank = 0, world = 1;  // data-parallel position
  uint64_t seed = 1234;
  bool shuffle = true, drop_last = false, prefetch = true;
};

struct StepData {
  LoaderState position;             // which step this is
  std::vector<model::Batch> micro;  // [grad_accum] this rank's micro-batches (some may have 0
                                    // rows), with their sample ids
  std::vector<int64_t> rows;        // this rank's row indices, micro-batches concatenated
  int64_t global_rows = 0;          // rows in the global batch (all ranks) at this step
  std::vector<int64_t> batch_rows;  // the global batch's row indices, for messages that name them
};

class DataLoader {
 public:
  DataLoader(const TokenFile& file, LoaderConfig cfg);  // throws UsageError on a bad size
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  StepData next();
  LoaderState state() const { return pos_; }  // the next step's position: what a checkpoint saves
  // Discards any prefetched step. A row past this file's end (a resume on a changed file) starts
  // the next epoch; a negative position throws UsageError.
  void restore(LoaderState s);

  int64_t global_batch() const { return cfg_.micro_batch * cfg_.grad_accum * cfg_.world; }
  int64_t steps_per_epoch() const;  // from an epoch's start
  // Progress (sampler.h) counted in steps of ref_batch rows: at this position, and per epoch.
  int64_t progress_rows(int64_t ref_batch) const;
  int64_t epoch_progress_rows(int64_t ref_batch) const;
  // Steps from this position until the progress reaches total_rows.
  int64_t steps_until(int64_t total_rows, int64_t ref_batch) const;

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
  int64_t per_ = 1;  // rows per example
  int64_t n_ = 0;    // examples in the file
  LoaderState pos_;
  std::future<StepData> pending_;  // the prefetched step at pos_, when valid
  int64_t order_epoch_ = -1;       // the epoch order_ holds, -1 before the first load
  std::vector<int64_t> order_;
};

}  // namespace shardtrain::data
