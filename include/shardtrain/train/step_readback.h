// Steps whose loss, gradient norm and phase times are still on the device. The loop reads them
// all in one host read when it must (a progress line, validation, a checkpoint, the run's end),
// not once per step: on a GPU the host then never waits for the device in between.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "shardtrain/fsdp/phase_clock.h"
#include "shardtrain/train/metrics.h"

namespace shardtrain::train {

struct PendingStep {
  StepMetrics m;               // the host's figures; loss, grad_norm and phases come at take()
  at::Tensor loss, grad_norm;  // 0-d, on the device
  at::Tensor preference;       // DPO: the step's stats sums (model::preference_loss), on the device
  at::Tensor aux;              // output_router_logits: the load-balancing loss, 0-d on the device
  std::shared_ptr<fsdp::PhaseClock> forward_backward, optimizer;  // their phases, read at take()
  std::vector<int64_t> rows;  // the global batch's rows in the token file
};

class StepReadback {
 public:
  void add(PendingStep s) { pending_.push_back(std::move(s)); }
  bool empty() const { return pending_.empty(); }
  // Every pending step, in order, with its loss, gradient norm and phases filled in: one host read.
  std::vector<PendingStep> take();

 private:
  std::vector<PendingStep> pending_;
};

}  // namespace shardtrain::train
