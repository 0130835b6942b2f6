// The forward/backward schedule over the FSDP units: unit by unit, each gathered before it runs
// (with the next ones prefetched), freed after it (FULL_SHARD), and in backward recomputed under
// full activation checkpointing, differentiated on its own and handed to the gradient reducer.
// It owns the units (the base and, where the base is frozen, what trains beside it) and the
// reductions in flight; the engine in front of it owns the step.
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "shardtrain/comm/parallel_dims.h"
#include "shardtrain/fsdp/flat_unit.h"
#include "shardtrain/fsdp/gradient_reducer.h"
#include "shardtrain/fsdp/host_offload.h"
#include "shardtrain/fsdp/sharding.h"
#include "shardtrain/fsdp/trainable_layout.h"
#include "shardtrain/model/llama.h"
#include "shardtrain/model/run_plan.h"

namespace shardtrain::fsdp {

// One forward/backward over a micro-batch: the detached input leaf and the output of every unit,
// [units].
struct Pass {
  std::vector<at::Tensor> inputs, outputs;
  bool empty = false;    // this rank has no rows: it still joins every collective
  model::UnitPass unit;  // what the run plan's units read: set by forward, kept for the recompute
  bool fused_head =
      false;  // the head returns the final norm's output; the loss applies lm_head (lm_loss.h)
  at::Tensor head_weight;  // fused_head: lm_head's view from the same split as the norm's (one
                           // gradient buffer)
};

class UnitSchedule {
 public:
  // units: the base; adapters: what trains beside a frozen base ([units], empty where the base
  // trains). plan: what each unit computes, called as it is. on_memory: called whenever
  // gathered units or reductions come or go. sizes: the units' (TrainableLayout::sizes), which
  // decide the backward skips and the budget.
  UnitSchedule(const model::ModelConfig& model, const ShardingConfig& cfg,
               const model::RunPlan& plan, comm::ParallelDims& groups, at::Device device,
               const TrainingSizes& sizes, std::vector<FlatUnit> units,
               std::vector<FlatUnit> adapters, std::function<void()> on_memory,
               std::vector<FlatUnit> experts = {});
  UnitSchedule(const UnitSchedule&) = delete;  // the reducer reads the units through `this`
  UnitSchedule& operator=(const UnitSchedule&) = delete;

  // share: a context-parallel share of the rows (tokens and positions are its own), whose
  // attention runs as a ring over the context group; nullptr: whole rows.
  at::Tensor forward(Pass& p, const at::Tensor& tokens, const at::Tensor& positions,
                     bool build_graph, const model::ContextShard* share = nullptr);
  // Backward in reverse unit order; reduce_now: each unit's gradient is reduced at once, else
  // added to its unsharded no-sync buffer for reduce_accumulated().
  // last: the step's last micro-batch (with reduce_now: its reductions are the step's last).
  void backward(Pass& p, const at::Tensor& loss, bool reduce_now, bool last = true);
  void reduce_accumulated();  // the no-sync buffers, reduced and zeroed
  void finish_reductions();   // every reduction issued is added to its gradient shard
  void release_grads();       // frees the gradient shards (after the optimizer step)
  void release_all();         // frees every gathered unit (after a forward without backward)

  // The base, or what trains beside it; u >= units().size(): unit u - units().size()'s experts
  // under expert parallelism (ShardPiece::unit).
  FlatUnit& trainable(int64_t u);
  const FlatUnit& trainable(int64_t u) const;
  const std::vector<FlatUnit>& units() const { return units_; }
  // Under expert parallelism, each unit's experts held here ([units]); empty otherwise.
  const std::vector<FlatUnit>& experts() const { return experts_; }
  const std::vector<FlatUnit>& adapters() const { return adapters_; }
  int peak_gathered_units() const { return peak_gathered_; }  // the most units gathered at once
  HostOffload* offload() { return offload_.get(); }           // --cpu-offload; nullptr otherwise
  const HostOffload* offload() const { return offload_.get(); }
  // Bytes that come and go within a step: gathered units, gradient shards, reductions in flight.
  int64_t transient_bytes() const;

 private:
  // What each unit has, decided once at construction.
  struct UnitParts {
    FlatUnit* base = nullptr;
    FlatUnit* adapter = nullptr;    // gathered and freed with the base; nullptr: none
    FlatUnit* experts = nullptr;    // likewise, over the expert shard group; nullptr: none
    FlatUnit* trainable = nullptr;  // the base, or the adapters (empty: the unit trains nothing)
    bool input_grad = false;        // a unit before it trains: its input needs a gradient
    bool runs_backward = false;     // it trains, or hands a gradient on to a unit that does
  };
  // f(unit, the group it is sharded over) for each part of unit u.
  template <class F>
  void for_each_part(int64_t u, F f) {
    f(*parts_[u].base, *groups_.shard);
    if (parts_[u].adapter) f(*parts_[u].adapter, *groups_.shard);
    if (parts_[u].experts) f(*parts_[u].experts, *groups_.expert_shard);
  }
  // A rank without rows: unit u's experts serve the other ranks' tokens (expert parallelism).
  at::Tensor serve_experts(int64_t u);
  // Gradient shards: the units' trainables and, where they train, their experts (trainable()).
  int64_t keys() const;
  // Where a trained part's gradient is reduced (nullptr: the shard group).
  comm::Communicator* reduce_group(int64_t key) const;
  at::Tensor run_unit(int64_t u, const at::Tensor& x, const Pass& p);
  bool reads_embedding(
      int64_t u) const;  // tie_word_embeddings: the head multiplies by the embedding's matrix
  void gather_tied_embedding();
  at::Tensor lm_head_view() const;   // lm_head.weight's view, or the tied embedding's; gathered
  bool recomputes(int64_t u) const;  // activation checkpointing: a decoder layer keeps no graph
  void ensure(int64_t unit);
  void prefetch(int64_t unit);
  void prefetch_from(int64_t unit, int direction);  // up to the in-flight limit, ahead of `unit`
  void note_gathered();
  void reduce_unit(int64_t unit, const at::Tensor& full_grad, bool owned,
                   bool last);  // issues, does not wait

  const model::ModelConfig& model_;
  const ShardingConfig& cfg_;
  const model::RunPlan& plan_;
  comm::ParallelDims& groups_;
  at::Device device_;
  model::Rotary rope_;
  model::ContextRing ring_;         // the context group as a ring (size 1: no context parallelism)
  std::vector<FlatUnit> units_;     // [num_layers + 2], model_units() order
  std::vector<FlatUnit> adapters_;  // [num_layers + 2] beside a frozen base; empty otherwise
  std::vector<FlatUnit> experts_;   // [num_layers + 2] under expert parallelism; empty otherwise
  std::shared_ptr<const model::ExpertGroup> expert_group_;  // null without expert parallelism
  std::vector<UnitParts> parts_;     // [units], pointing into units_ and adapters_
  std::vector<at::Tensor> no_sync_;  // [keys] fp32 [padded], with no_sync_accumulation
  std::vector<std::pair<std::string, std::string>>
      nvtx_names_;  // [units]: "fwd unit 3", "bwd unit 3"
  std::function<void()> on_memory_;
  GradientReducer reducer_;  // reductions issued and not yet added to the gradient shards
  std::unique_ptr<HostOffload> offload_;  // --cpu-offload: gradients to the host, host steps
  bool backward_ = false;  // in backward(): units that run no backward are not gathered
  int peak_gathered_ = 0;
};

}  // namespace shardtrain::fsdp
