// When no row of a plan fits: the cheapest change that makes one fit, tried in the order of what
// it costs (recomputing activations on the same GPUs, then a context group, then both), or, when
// none does, what binds: the per-rank memory that more nodes, --cpu-offload and adapters cannot
// shrink.
#pragma once
#include <string>
#include <vector>

#include "shardtrain/plan/planner.h"

namespace shardtrain::plan {

struct Remedy {
  bool ran = false;                  // nothing fits as planned
  bool tried_checkpointing = false;  // --activation-checkpointing full was not given and was tried
  bool checkpointing = false;        // the fit adds --activation-checkpointing full (every layer)
  int every_was = 1;                 // the plan's --ac-every: the fit sets it to 1
  int context_parallel = 0;          // the fit's --context-parallel; 0: none
  // Context parallelism could be tried: not given, padded rows; sizes: the divisors of
  // --gpus-per-node above 1 (none on one GPU a node).
  bool context_searched = false;
  std::vector<int> context_sizes;
  PlanRow best;  // the row that fits, when found
  // Found nothing: the smallest per-rank peak less the state that sharding and offload shrink
  // (activations, a gathered unit, the allowances), at the cheapest checkpointing tried.
  int64_t unshardable_bytes = 0;
  bool activations_bind = false;  // that alone exceeds the device: more GPUs for state cannot help

  bool found() const { return checkpointing || context_parallel > 1; }
  std::string options() const;  // the flags that make the fit, e.g. "--context-parallel 2"
};

Remedy search_remedy(const PlanInput& in, const std::vector<PlanRow>& rows);

// The lines under the table when nothing fits: the remedy, or what to change and why.
std::string remedy_text(const PlanInput& in, const std::vector<PlanRow>& rows, const Remedy& r);

}  // namespace shardtrain::plan
