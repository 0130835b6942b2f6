// Gradient reduction and its completion: each unit's unsharded gradient is reduce-scattered over
// the shard group as soon as its backward is done, then (HYBRID_SHARD) all-reduced across
// replicas, then added into the unit's fp32 gradient shard. Nothing waits at issue. The send
// buffers in flight are bounded by bytes: before a new reduction starts, the oldest reductions
// (reduce-scatter and, under HYBRID_SHARD, all-reduce) complete until the new one fits (with the
// default budget, one unit's: FSDP2's one reduction in flight). A hybrid all-reduce starts as soon
// as its reduce-scatter completes (on the GPU chained on the device, which completes nothing for
// the compute stream). A send buffer is reused only once its reduce-scatter is complete on the
// device or the compute stream has waited for it.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <vector>

#include "shardtrain/comm/parallel_dims.h"

namespace shardtrain::fsdp {

// Bytes a unit's reduction holds while its reduce-scatter runs: the send buffer [padded] in the
// reduce dtype and, over more than one rank, the received shard [shard_numel].
int64_t scatter_bytes(int64_t padded, int64_t shard_numel, int shard_size, int reduce_elt);
// How many of the oldest reductions in flight (bytes each, oldest first) must complete before
// one of `incoming` bytes is issued, so that at most `budget` bytes are in flight with it. A
// reduction larger than the budget still runs, alone.
size_t reductions_to_complete(const std::vector<int64_t>& in_flight, int64_t incoming,
                              int64_t budget);

class GradientReducer {
 public:
  using GradShard = std::function<at::Tensor&(int64_t unit)>;  // the unit's fp32 gradient shard
                                                               // (may be undefined)
  GradientReducer(comm::ParallelDims& groups, at::ScalarType reduce_dtype, GradShard grad_of,
                  std::function<void()> on_change);
  // The most send and receive bytes in flight at once (scatter_bytes): the engine passes its
  // largest unit's, so one reduce-scatter overlaps the next unit's backward.
  void set_budget(int64_t bytes) { budget_ = bytes; }
  // Issues the reduction of `full_grad` ([padded]) into a [shard_numel] shard; owned: the
  // gradient is ours, so at world 1 it may become the shard without a copy.
  // last: the step's final reduction of this unit (handed to on_added).
  // shard: the group the unit is sharded over (nullptr: the shard group; an expert unit's: the
  // expert shard group); either way its replicas are the replicate group's.
  void reduce(int64_t unit, const at::Tensor& full_grad, int64_t shard_numel, bool owned,
              bool last = false, comm::Communicator* shard = nullptr);
  // Called whenever a reduction is added into its unit's gradient shard, with its `last`
  // (--cpu-offload: the shard goes to the host then).
  void set_on_added(std::function<void(int64_t unit, bool last)> f) { on_added_ = std::move(f); }
  void finish();                    // every reduction issued so far is added to its gradient shard
  int64_t bytes_in_flight() const;  // the send and receive buffers of the pending reductions

 private:
  struct Pending {
    int64_t unit = 0;
    at::Tensor send, shard;  // [padded] (undefined once scattered) and [shard_numel], reduce dtype
    bool owned = true;       // shard may become the gradient without a copy
    bool last = false;       // the step's final reduction of the unit
    bool reused_send =
        false;  // send is the reducer's buffer (a converted copy), reusable once scattered
    bool done_scatter = false;  // scattered() ran: the send buffer is free, the all-reduce issued
    comm::WorkPtr scatter;      // the reduce-scatter, until it completed
    comm::WorkPtr replicate;    // hybrid: the all-reduce across replicas, once issued
  };
  bool hybrid() const;
  int64_t held(const Pending& r) const;
  void scattered(
      Pending& r);  // its reduce-scatter completed: free the send buffer, start the all-reduce
  void progress();  // without blocking, in issue order: start the all-reduces that can start
  void complete_scatter(Pending& r);  // blocks until its reduce-scatter completed
  void complete_oldest();  // the oldest reduction, all-reduce included, added to its gradient shard
  void add(Pending& r);    // into the unit's fp32 gradient shard (after its all-reduce)

  comm::ParallelDims& groups_;
  at::ScalarType reduce_dtype_;
  GradShard grad_of_;
  std::function<void()> on_change_;  // memory accounting: buffers came or went
  std::function<void(int64_t, bool)> on_added_;
  int64_t budget_ = 0;           // 0: one reduction at a time
  std::deque<Pending> pending_;  // issued and not yet added, oldest first
  std::vector<at::Tensor>
      spare_;  // send buffers of completed reduce-scatters, for the next reduction
};

}  // namespace shardtrain::fsdp
