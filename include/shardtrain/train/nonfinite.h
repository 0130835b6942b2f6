// The non-finite guard: a NaN or Inf loss or gradient norm, found after backward and before
// the optimizer step. Both figures are already reduced over the ranks (the loss by an
// all-reduce, the norm's square by the optimizer's sum across shards), so every rank reaches
// the same verdict without another collective.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "shardtrain/train/config.h"

namespace shardtrain::train {

struct NonfiniteVerdict {
  bool finite = true;   // the step may go on to the optimizer
  bool stop = false;    // training ends (--on-nonfinite stop, or too many skips in a row)
  std::string message;  // names the step and the global batch's rows; empty when finite
};

class NonfiniteGuard {
 public:
  NonfiniteGuard(NonfiniteConfig cfg, std::string data_path)
      : cfg_(cfg), data_path_(std::move(data_path)) {}
  // rows: the global batch's row indices in the token file.
  NonfiniteVerdict check(int64_t step, double loss, double grad_norm,
                         const std::vector<int64_t>& rows);
  // The same rules on the device, before the host has read loss and norm: a float scalar, 1 where
  // the optimizer must skip this step (non-finite, or the run has stopped: every later step too,
  // so the weights stay as they were until the host reads the verdict with check()).
  at::Tensor skip_on_device(const at::Tensor& loss, const at::Tensor& grad_norm);
  int64_t skipped() const { return skipped_; }  // steps skipped in this run
  bool skips() const { return cfg_.skip; }      // --on-nonfinite skip
  const std::string& last_message() const { return last_message_; }

 private:
  NonfiniteConfig cfg_;
  std::string data_path_;
  int64_t skipped_ = 0, in_a_row_ = 0;
  std::string last_message_;
  at::Tensor in_a_row_t_, stopped_t_;  // skip_on_device's state: float scalars on the device
};

// "[3, 17, 42]", or the first `limit` and "... (N rows)" after them.
std::string format_rows(const std::vector<int64_t>& rows, size_t limit = 16);

}  // namespace shardtrain::train
