// The FSDP engine: PyTorch FSDP's semantics over the Communicator interface.
//
// Design in brief. Each model unit (embedding, decoder layer, head) is one FSDP unit whose
// parameters live flat and sharded (FlatUnit). The autograd graph is cut at unit boundaries:
// each unit's input is a fresh leaf, so forward runs unit by unit (gather, compute, free) and
// backward is run by hand in reverse (gather again, recompute under activation checkpointing,
// autograd within the unit, reduce-scatter the gradient, free). The model's math is
// model/llama.h's unit_forward, the same code single-rank runs use. The engine only produces
// sharded gradients; the optimizer component (make_optimizer) clips and steps the shards.
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <array>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "shardtrain/comm/parallel_dims.h"
#include "shardtrain/fsdp/engine_memory.h"
#include "shardtrain/fsdp/objective.h"
#include "shardtrain/fsdp/phase_clock.h"
#include "shardtrain/fsdp/sharding.h"
#include "shardtrain/fsdp/trainable_layout.h"
#include "shardtrain/fsdp/unit_builder.h"
#include "shardtrain/fsdp/unit_schedule.h"
#include "shardtrain/io/safetensors.h"
#include "shardtrain/model/decoder.h"
#include "shardtrain/model/llama.h"
#include "shardtrain/model/micro_batch.h"
#include "shardtrain/model/run_plan.h"
#include "shardtrain/optim/optimizer.h"
#include "shardtrain/runtime/phases.h"

namespace shardtrain::fsdp {

// What a step's forward and backward produced; the gradients stay in the shards
// (layout().pieces()).
struct GradResult {
  at::Tensor
      loss_t;       // 0-d fp64 on the device: the mean over the global batch's loss tokens, reduced
  double loss = 0;  // loss_t read on the host, when forward_backward was asked to (read_loss)
  int64_t tokens = 0;          // loss tokens in the global batch
  runtime::PhaseTimes phases;  // forward, backward and the exposed communication inside them
  std::shared_ptr<PhaseClock>
      clock;  // !read_loss: the phases, read later (clock->finish()), not here
  std::array<int64_t, runtime::kNumPhases>
      peak_bytes{};  // forward and backward: see take_phase_peak()
  at::Tensor stats;  // the objective's statistics ([num_stats()] fp64 sums over all ranks)
  // output_router_logits: the load-balancing loss (transformers' aux_loss, before its weight),
  // 0-d fp64 on the device, the mean over the micro-batches; loss_t includes its weighted share.
  at::Tensor aux_t;
};

// What an engine runs: the model, how it is sharded, what each unit computes (the model side's
// plan, which the engine hands to its schedule without looking inside), and where.
struct EngineSpec {
  model::ModelConfig model;
  ShardingConfig sharding;  // param_dtype resolved for the device
  model::RunPlan plan;
  at::Device device = at::kCPU;
};

// The engine is a front: the units and their schedule (UnitSchedule), what trains
// (TrainableLayout), the memory accounting (EngineMemory); here, a step and its results.
class FsdpEngine {
 public:
  // Weights: the seeded init (identical at any world size), or `weights` read shard by shard.
  // Where the plan freezes the base, the trainable pieces are its adapters: seeded, or read from
  // `adapters` (their trainable_key() names). dims: the mesh, whose groups the engine uses.
  FsdpEngine(EngineSpec spec, comm::ParallelDims& dims, uint64_t seed,
             const io::SafetensorsModel* weights = nullptr,
             const io::SafetensorsModel* adapters = nullptr);
  FsdpEngine(const FsdpEngine&) = delete;  // the schedule and memory read through `this`
  FsdpEngine& operator=(const FsdpEngine&) = delete;

  // Forward and backward over this rank's micro-batches (rows may be 0: the rank still joins
  // every collective), training `objective`: the step's loss is the mean of its losses over the
  // global batch. Leaves the reduced, sharded fp32 gradients for grad_shards(). read_loss = false
  // keeps the loss on the device (GradResult::loss_t): no host synchronisation.
  GradResult forward_backward(const std::vector<model::MicroBatch>& micro_batches,
                              Objective& objective, bool read_loss = true);
  // Forward only, on this rank's tokens [B, T] (positions: Batch::positions); on the host, or
  // where the engine computes (on_host = false).
  at::Tensor logits(const at::Tensor& tokens, const at::Tensor& positions = {},
                    bool on_host = true);
  // Forward only: what `objective` makes of one micro-batch's head (Objective::evaluate).
  // Collective: every rank calls it, with its rows or none.
  at::Tensor evaluate(const model::MicroBatch& mb, Objective& objective);
  std::vector<at::Tensor>
  grad_shards();         // layout().pieces()' gradients after forward_backward, same order
  void release_grads();  // frees the gradient shards (after the optimizer step)

  // The whole model for decoding on this rank with a KV cache and no collective (the base and
  // its adapters, gathered once: collective, every rank calls it).
  model::Decoder decoder();
  // Every base parameter (adapters: every adapter instead), unsharded, fp32: an all-gather per
  // unit over the shard group.
  std::map<std::string, at::Tensor> full_parameters(bool adapters = false);
  // What trains and what checkpoints hold (the model's parameters, or adapters), and this rank's
  // pieces of it.
  const TrainableLayout& layout() const { return *layout_; }
  EngineMemory& memory() { return *memory_; }
  const UnitSchedule& schedule() const { return *schedule_; }
  const EngineSpec& spec() const { return spec_; }

 private:
  // The optimizer steps the shards, on the host thread under --cpu-offload: it owns that thread's
  // work in flight (optim::Optimizer::settle), through the schedule's HostOffload.
  friend optim::Optimizer make_optimizer(FsdpEngine& engine, const optim::OptimizerConfig& cfg);
  std::vector<uint64_t> dropout_row_seeds(
      const model::Batch& mb);  // UnitPass::row_seeds for a training micro-batch
  std::map<std::string, at::Tensor> gather_full(const std::vector<FlatUnit>& units);
  // Expert parallelism: every rank's experts, gathered over the expert shard and expert groups.
  void gather_experts(std::map<std::string, at::Tensor>& out);

  EngineSpec spec_;
  const model::ModelConfig& model_;  // spec_'s, by their usual names
  const ShardingConfig& cfg_;
  const at::Device& device_;
  comm::ParallelDims& groups_;
  std::unique_ptr<TrainableLayout> layout_;
  std::unique_ptr<EngineMemory> memory_;
  std::unique_ptr<UnitSchedule> schedule_;
  uint64_t seed_ =
      0;  // adapter dropout's masks come from it and each row's sample (model::dropout_row_seeds)
  uint64_t unnamed_passes_ =
      0;  // batches without sample ids (tests, tools): each pass draws its own masks
};

// The optimizer component for an engine: AdamW over this rank's master shards, the gradient
// norm summed across the shard group (whose shards tile the model; replicas hold equal ones).
optim::Optimizer make_optimizer(FsdpEngine& engine, const optim::OptimizerConfig& cfg);

}  // namespace shardtrain::fsdp
