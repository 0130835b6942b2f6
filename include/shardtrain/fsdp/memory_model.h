// Memory per rank as pure arithmetic over the units' flat layouts: the engine reports its own
// persistent bytes and counts gathered units with these functions, and `shardtrain plan`
// predicts a step's peak by walking the engine's gather/free/reduce schedule with them.
#pragma once
#include <cstdint>
#include <vector>

#include "shardtrain/fsdp/sharding.h"
#include "shardtrain/fsdp/trainable_layout.h"
#include "shardtrain/model/activation_memory.h"

namespace shardtrain::fsdp {

// The reduce-scatter bytes allowed in flight (GradientReducer::set_budget): the largest trainable
// unit's send and receive buffers, so one reduce-scatter runs beside the next unit's backward.
int64_t reduce_budget(const std::vector<UnitSize>& trainable, int shard_size, int reduce_elt);

// A gathered unit: the padded flat buffer in the compute dtype.
inline int64_t gathered_bytes(int64_t padded, int elt) { return padded * elt; }

// Bytes per rank: persistent (the trainable tensors' fp32 master, exp_avg and exp_avg_sq: 4 + 8
// per shard element; the unsharded fp32 no-sync buffers; a frozen base's shard in the compute
// dtype) and the fp32 gradient shards (4 per element), which exist only from the step's first
// reduction to the optimizer step; beside the figure one unsharded replica would need (16 bytes
// per trainable parameter, plus the base). Where the base is frozen, param/grad/optimizer_bytes
// are the adapters'. The engine reports it, the planner predicts it, the metrics print it.
// With --cpu-offload the trainable state lives in host memory instead (host_bytes: fp32 master 4,
// AdamW's moments 8, the fp32 gradient shard 4 and the mirror of the master in the compute dtype
// param_elt, per shard element): param/grad/optimizer_bytes are then 0 and the device keeps only
// a frozen base and the no-sync buffers.
struct MemoryReport {
  int64_t param_bytes = 0, grad_bytes = 0, optimizer_bytes = 0, no_sync_bytes = 0;
  int64_t base_bytes = 0;  // a frozen base's shard in the compute dtype; 0 where the base trains
  int64_t unsharded_bytes = 0, padding_elements = 0;
  int64_t host_bytes = 0;  // --cpu-offload: the trainable state in host memory, per rank
  int64_t trainable_bytes() const {
    return param_bytes + optimizer_bytes + no_sync_bytes;
  }  // persistent
  int64_t persistent() const { return trainable_bytes() + base_bytes; }
};
MemoryReport persistent_bytes(const TrainingSizes& sizes, bool no_sync, int param_elt,
                              bool cpu_offload = false);
// --cpu-offload: host bytes per trainable shard element (master, moments, gradient, mirror).
inline int64_t offloaded_bytes_per_element(int param_elt) { return 4 + 8 + 4 + param_elt; }

// One step's peak, walked through the engine's schedule (engine.cpp: forward, backward,
// reduce_unit, advance): which units are gathered, which reductions are in flight, which
// gradient shards exist, and which activations autograd holds at each point.
struct StepShape {
  int64_t micro_batch_rows = 1, seq_len = 1, grad_accum = 1;
  int param_elt = 4, reduce_elt = 4;
  int shard_size = 1;           // the ranks a unit is sharded over
  bool tied_embedding = false;  // the head multiplies by the embedding: gathered for it, its
                                // gradient kept until the embedding's backward
  int64_t head_chunk = 0;       // tokens of the head's logits at once (model::RunPlan::head_chunk);
                                // 0: the whole head unfused
};
// With cfg.cpu_offload the walk also holds, per unit whose all-gather is in flight, its shard
// copied from the host in the compute dtype (staging), and keeps a gradient shard on the device
// only until its copy to the host: the two most recently reduced units' at most.
struct StepPeak {
  int64_t engine_bytes = 0;  // the engine's own accounting (held_bytes): no activations
  int64_t total_bytes = 0;   // every tensor: what the caching allocator or host counter sees
  // The terms at the total's peak, for the breakdown.
  int64_t persistent = 0, gathered = 0, reductions = 0, grad_shards = 0, activations = 0;
  int64_t staging = 0;  // --cpu-offload: shards copied from the host for gathers in flight
  int gathered_units = 0;
};
StepPeak step_peak(const TrainingSizes& sizes, const ShardingConfig& cfg, const StepShape& shape,
                   const model::ActivationBytes& act, int64_t persistent);

}  // namespace shardtrain::fsdp
