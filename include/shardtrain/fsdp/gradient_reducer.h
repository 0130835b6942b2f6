// Gradient reduction and its completion: each unit's unsharded gradient is reduce-scattered over
// the shard group as soon as its backward is done, then (HYBRID_SHARD) all-reduced across
// replicas, then added into the unit's fp32 gradient shard. Nothing waits at issue: the oldest
// reductions complete only when more than kMaxPending are in flight, and all before the optimizer.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <deque>
#include <functional>

#include "shardtrain/comm/process_groups.h"

namespace shardtrain::fsdp {

class GradientReducer {
 public:
  using GradShard = std::function<at::Tensor&(int64_t unit)>;  // the unit's fp32 gradient shard (may be undefined)
  GradientReducer(comm::ProcessGroups& groups, at::ScalarType reduce_dtype, GradShard grad_of,
                  std::function<void()> on_change);
  // Issues the reduction of `full_grad` ([padded]) into a [shard_numel] shard; owned: the
  // gradient is ours, so at world 1 it may become the shard without a copy.
  void reduce(int64_t unit, const at::Tensor& full_grad, int64_t shard_numel, bool owned);
  void finish();                   // every reduction issued so far is added to its gradient shard
  int64_t bytes_in_flight() const;  // the send and receive buffers of the pending reductions

  static constexpr size_t kMaxPending = 2;

 private:
  struct Pending {
    enum Stage { kScattering, kReplicating, kDone } stage = kScattering;
    int64_t unit = 0;
    at::Tensor send, shard;  // [padded] and [shard_numel] in the reduce dtype
    bool owned = true;       // shard may become the gradient without a copy
    comm::WorkPtr work;
  };
  bool advance(Pending& r);  // waits for its current stage; true once added to the gradient

  comm::ProcessGroups& groups_;
  at::ScalarType reduce_dtype_;
  GradShard grad_of_;
  std::function<void()> on_change_;  // memory accounting: buffers came or went
  std::deque<Pending> pending_;      // issued and not yet added, oldest first
};

}  // namespace shardtrain::fsdp
