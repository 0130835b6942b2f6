// Memory per rank as pure arithmetic over the units' flat layouts: the engine reports its own
// persistent bytes and counts gathered units with these functions, and `shardtrain plan`
// predicts a step's peak by walking the engine's gather/free/reduce schedule with them.
#pragma once
#include <cstdint>
#include <vector>

#include "shardtrain/fsdp/flat_layout.h"
#include "shardtrain/fsdp/sharding.h"
#include "shardtrain/model/activation_memory.h"
#include "shardtrain/model/params.h"

namespace shardtrain::fsdp {

struct UnitSize {
  model::UnitKind kind = model::UnitKind::kEmbedding;
  int64_t numel = 0, padded = 0, shard_numel = 0;  // elements: FlatLayout's
};
inline UnitSize unit_size(const FlatLayout& l, model::UnitKind kind) { return {kind, l.numel, l.padded, l.shard_numel}; }
// Every unit of `specs` (the model's or LoRA's), in model_units() order, sharded over shard_size.
std::vector<UnitSize> unit_sizes(const model::ModelConfig& model, const std::vector<model::ParamSpec>& specs, int shard_size);

// The reduce-scatter bytes allowed in flight (GradientReducer::set_budget): the largest trainable
// unit's send and receive buffers, so one reduce-scatter runs beside the next unit's backward.
int64_t reduce_budget(const std::vector<UnitSize>& trainable, int shard_size, int reduce_elt);

// A gathered unit: the padded flat buffer in the compute dtype.
inline int64_t gathered_bytes(int64_t padded, int elt) { return padded * elt; }

// Persistent bytes (see MemoryReport in engine.h): fp32 master (4), exp_avg and exp_avg_sq (8)
// per trainable shard element, the fp32 gradient shard (4, during the step), the unsharded
// fp32 no-sync buffers, and under LoRA the frozen base shard in the compute dtype.
struct PersistentBytes {
  int64_t param = 0, grad = 0, optimizer = 0, no_sync = 0, base = 0, padding_elements = 0;
  int64_t unsharded = 0;  // one unsharded replica: 16 bytes per trainable parameter, plus the base
};
PersistentBytes persistent_bytes(const std::vector<UnitSize>& trainable, const std::vector<UnitSize>* frozen_base,
                                 bool no_sync, int param_elt);

// One step's peak, walked through the engine's schedule (engine.cpp: forward, backward,
// reduce_unit, advance): which units are gathered, which reductions are in flight, which
// gradient shards exist, and which activations autograd holds at each point.
struct StepShape {
  int64_t micro_batch_rows = 1, seq_len = 1, grad_accum = 1;
  int param_elt = 4, reduce_elt = 4;
  int shard_size = 1;  // the ranks a unit is sharded over
  bool tied_embedding = false;  // the head multiplies by the embedding: gathered for it, its gradient kept until the embedding's backward
};
struct StepPeak {
  int64_t engine_bytes = 0;  // the engine's own accounting (held_bytes): no activations
  int64_t total_bytes = 0;   // every tensor: what the caching allocator or host counter sees
  // The terms at the total's peak, for the breakdown.
  int64_t persistent = 0, gathered = 0, reductions = 0, grad_shards = 0, activations = 0;
  int gathered_units = 0;
};
StepPeak step_peak(const std::vector<UnitSize>& base, const std::vector<UnitSize>* adapters, const FsdpConfig& cfg,
                   const StepShape& shape, const model::ActivationBytes& act, int64_t persistent);

}  // namespace shardtrain::fsdp
