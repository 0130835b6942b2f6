#include "shardtrain/data/loader.h"

#include "shardtrain/data/sampler.h"
#include "shardtrain/runtime/counted.h"
#include "shardtrain/runtime/error.h"

namespace shardtrain::data {

DataLoader::DataLoader(const TokenFile& file, LoaderConfig cfg)
    : file_(&file), cfg_(cfg), per_(rows_per_example(file.meta())), n_(file.rows() / per_) {
  if (cfg_.micro_batch <= 0 || cfg_.grad_accum <= 0)
    throw runtime::UsageError("--batch-size and --grad-accum must be positive");
  if (cfg_.drop_last && n_ < global_batch())
    throw runtime::UsageError(file.path() + " has " +
                              runtime::counted(n_, per_ == 2 ? "pair" : "row") +
                              ", fewer than one global batch of " + std::to_string(global_batch()) +
                              " (batch-size x grad-accum x data-parallel ranks); lower "
                              "--batch-size");
}

DataLoader::~DataLoader() {
  if (pending_.valid()) pending_.wait();
}

int64_t DataLoader::steps_per_epoch() const {
  return std::max<int64_t>(1,
                           shardtrain::data::steps_per_epoch(n_, global_batch(), cfg_.drop_last));
}

const std::vector<int64_t>& DataLoader::order(int64_t epoch) {
  if (order_epoch_ != epoch) {
    if (cfg_.shuffle) {
      order_ = epoch_permutation(n_, cfg_.seed, epoch);
    } else {
      order_.resize(n_);
      for (int64_t i = 0; i < n_; ++i) order_[i] = i;
    }
    order_epoch_ = epoch;
  }
  return order_;
}

int64_t DataLoader::progress_rows(int64_t ref_batch) const {
  return shardtrain::data::progress_rows(pos_, n_, ref_batch, cfg_.drop_last);
}

int64_t DataLoader::epoch_progress_rows(int64_t ref_batch) const {
  return shardtrain::data::epoch_progress_rows(n_, ref_batch, cfg_.drop_last);
}

int64_t DataLoader::steps_until(int64_t total_rows, int64_t ref_batch) const {
  return shardtrain::data::steps_until(pos_, total_rows, n_, global_batch(), ref_batch,
                                       cfg_.drop_last);
}

std::vector<int64_t> DataLoader::global_rows(LoaderState s) {
  return shardtrain::data::global_batch(order(s.epoch), global_batch(), s.row);
}

LoaderState DataLoader::after(LoaderState s) const {
  return next_position(s, n_, global_batch(), cfg_.drop_last);
}

StepData DataLoader::load(LoaderState s) {
  StepData d;
  d.position = s;
  const std::vector<int64_t> rows = global_rows(s);
  // The examples' rows: a pair's chosen, then its rejected.
  const auto rows_of = [this](const std::vector<int64_t>& examples) {
    std::vector<int64_t> out;
    for (int64_t e : examples)
      for (int64_t k = 0; k < per_; ++k) out.push_back(e * per_ + k);
    return out;
  };
  d.batch_rows = rows_of(rows);
  d.global_rows = static_cast<int64_t>(d.batch_rows.size());
  for (auto& examples : rank_micro_batches(rows, cfg_.rank, cfg_.world, cfg_.grad_accum)) {
    const std::vector<int64_t> idx = rows_of(examples);
    d.rows.insert(d.rows.end(), idx.begin(), idx.end());
    d.micro.push_back(file_->read(idx));
    d.micro.back().sample_ids = idx;  // adapter dropout's masks are drawn per sample, not per rank
    d.micro.back().epoch = s.epoch;
  }
  return d;
}

StepData DataLoader::next() {
  StepData d = pending_.valid() ? pending_.get() : load(pos_);
  pos_ = after(pos_);
  if (cfg_.prefetch)
    pending_ = std::async(std::launch::async, [this, p = pos_] { return load(p); });
  return d;
}

void DataLoader::restore(LoaderState s) {
  if (pending_.valid()) {
    pending_.wait();
    pending_ = {};
  }
  if (s.epoch < 0 || s.row < 0)
    throw runtime::UsageError("data-loader position epoch " + std::to_string(s.epoch) + " row " +
                              std::to_string(s.row) + " is negative; the checkpoint is damaged");
  const bool past_end = s.row >= n_ || (cfg_.drop_last && n_ - s.row < global_batch());
  pos_ = past_end ? LoaderState{s.epoch + 1, 0} : s;
}

}  // namespace shardtrain::data
