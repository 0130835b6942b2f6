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

#include "shardtrain/comm/process_groups.h"
#include "shardtrain/fsdp/engine_memory.h"
#include "shardtrain/fsdp/phase_clock.h"
#include "shardtrain/fsdp/sharding.h"
#include "shardtrain/fsdp/trainable_layout.h"
#include "shardtrain/fsdp/unit_builder.h"
#include "shardtrain/fsdp/unit_schedule.h"
#include "shardtrain/io/safetensors.h"
#include "shardtrain/model/batch.h"
#include "shardtrain/model/llama.h"
#include "shardtrain/model/preference_loss.h"
#include "shardtrain/optim/optimizer.h"
#include "shardtrain/runtime/phases.h"

namespace shardtrain::fsdp {

// What a step's forward and backward produced; the gradients stay in the shards (pieces()).
struct GradResult {
  at::Tensor
      loss_t;       // 0-d fp64 on the device: the mean over the global batch's loss tokens, reduced
  double loss = 0;  // loss_t read on the host, when forward_backward was asked to (read_loss)
  int64_t tokens = 0;          // loss tokens in the global batch
  runtime::PhaseTimes phases;  // forward, backward and the exposed communication inside them
  std::shared_ptr<PhaseClock>
      clock;  // !read_loss: the phases, read later (clock->finish()), not here
  std::array<int64_t, runtime::kNumPhases>
      peak_bytes{};       // forward and backward: see take_phase_peak()
  at::Tensor preference;  // DPO: [kNumPreferenceStats] fp64 sums over the global batch's pairs
};

// DPO's reference log-probabilities for a batch's rows: [B] summed answer log-probs.
using ReferenceFn = std::function<at::Tensor(const model::Batch&)>;

// The engine is a front: the units and their schedule (UnitSchedule), what trains
// (TrainableLayout), the memory accounting (EngineMemory); here, a step and its results.
class FsdpEngine {
 public:
  // Weights: the seeded init (identical at any world size), or `weights` read shard by shard.
  // With cfg.lora enabled, the base is frozen and the trainable pieces are the adapters: seeded
  // (PEFT's init), or read from `adapters` (PEFT's adapter_model.safetensors keys).
  FsdpEngine(model::ModelConfig model, FsdpConfig cfg, comm::ProcessGroups& groups, uint64_t seed,
             const io::SafetensorsModel* weights = nullptr, at::Device device = at::kCPU,
             const io::SafetensorsModel* adapters = nullptr);
  FsdpEngine(const FsdpEngine&) = delete;  // the schedule and memory read through `this`
  FsdpEngine& operator=(const FsdpEngine&) = delete;

  // Forward and backward over this rank's micro-batches (rows may be 0: the rank still joins
  // every collective). Leaves the reduced, sharded fp32 gradients for grad_shards().
  // read_loss = false keeps the loss on the device (GradResult::loss_t): no host synchronisation.
  GradResult forward_backward(const std::vector<model::Batch>& micro_batches,
                              bool read_loss = true);
  // Forward only, on this rank's tokens [B, T] (positions: Batch::positions); on the host, or
  // where the engine computes (on_host = false: validation's loss, without copying logits).
  at::Tensor logits(const at::Tensor& tokens, const at::Tensor& positions = {},
                    bool on_host = true);
  // The loss summed over a batch's loss tokens, and their count, forward only: this rank's rows,
  // or under context parallelism its share of them (the group's ranks sum to the rows' loss).
  model::LossSum eval_loss(const model::Batch& batch);
  // Each row's summed log-probability of its answer tokens, forward only, [B] fp64 on the host.
  // adapters = false: a LoRA run's base model alone (DPO's reference, no second copy). Under
  // context parallelism each rank sums its share and the group adds them: every rank gets the
  // rows' whole sums.
  at::Tensor row_logps(const model::Batch& batch, bool adapters = true);
  // DPO: forward_backward trains cfg's preference loss on the rows' pairs (2i chosen, 2i + 1
  // rejected) against reference's log-probabilities; the loss is the mean over the global
  // batch's pairs, TRL's DPOTrainer's.
  void set_preference(const model::PreferenceConfig& cfg, ReferenceFn reference);
  bool preference() const { return static_cast<bool>(reference_); }
  // DPO's loss and metrics' sums (preference_loss) for a batch against reference, forward only:
  // validation. Collective: every rank calls it, with its rows or none.
  at::Tensor eval_preference(const model::Batch& batch, const ReferenceFn& reference);
  // The data-parallel position: ranks of a context group share their rows (one data rank).
  int data_rank() const;
  int data_world() const;
  std::vector<at::Tensor> grad_shards();  // pieces()' gradients after forward_backward, same order
  void release_grads();                   // frees the gradient shards (after the optimizer step)
  const std::vector<ShardPiece>& pieces() const {
    return pieces_;
  }  // this rank's trainable ones, in model order

  // Every base parameter, unsharded, fp32 (an all-gather per unit over the shard group).
  std::map<std::string, at::Tensor> full_parameters();
  std::map<std::string, at::Tensor> full_adapters();  // LoRA: every adapter, unsharded, fp32
  // What trains and what checkpoints hold: the model's parameters, or a LoRA run's adapters.
  const TrainableLayout& layout() const { return *layout_; }
  // Frozen base: (param_offset, numel, CRC-32 of the fp32 values) of this rank's piece of each base
  // parameter as read at construction, one row per llama_param_specs entry (none held: -1);
  // combined over the shard group into one checksum of the base (ckpt::base_crc32).
  const std::vector<runtime::CrcRow>& base_crc_rows() const { return base_crc_rows_; }
  // --cpu-offload: the host side (gradients to the host, the optimizer's host thread); nullptr
  // otherwise. settle(): every host step given is done (before reading masters or moments).
  HostOffload* host_offload() { return schedule_->offload(); }
  void settle();
  EngineMemory& memory() { return *memory_; }
  const UnitSchedule& schedule() const { return *schedule_; }
  const comm::ProcessGroups& groups() const { return groups_; }
  const model::ModelConfig& model() const { return model_; }
  const FsdpConfig& config() const { return cfg_; }
  const at::Device& device() const { return device_; }

 private:
  std::vector<uint64_t> dropout_row_seeds(
      const model::Batch& mb);  // Pass::row_seeds for a training micro-batch
  std::map<std::string, at::Tensor> gather_full(const std::vector<FlatUnit>& units);
  // Under context parallelism, this rank's share of each batch; empty without.
  std::vector<model::ContextShard> context_shares(const std::vector<model::Batch>& batches) const;
  // Each row's sum over the context group of this rank's partial sums [B]: the whole row's on
  // every rank, differentiable in this rank's part only (each rank backpropagates its tokens).
  at::Tensor context_row_sum(const at::Tensor& partial) const;

  model::ModelConfig model_;
  FsdpConfig cfg_;  // param_dtype resolved for the device
  comm::ProcessGroups& groups_;
  at::Device device_;
  std::unique_ptr<TrainableLayout> layout_;
  std::unique_ptr<EngineMemory> memory_;
  std::unique_ptr<UnitSchedule> schedule_;
  std::vector<ShardPiece> pieces_;  // this rank's pieces of every unit's shard
  std::vector<runtime::CrcRow> base_crc_rows_;
  uint64_t seed_ =
      0;  // LoRA dropout's masks come from it and each row's sample (model::dropout_row_seeds)
  model::PreferenceConfig preference_;
  ReferenceFn reference_;  // set: DPO
  uint64_t unnamed_passes_ =
      0;  // batches without sample ids (tests, tools): each pass draws its own masks
};

// The optimizer component for an engine: AdamW over this rank's master shards, the gradient
// norm summed across the shard group (whose shards tile the model; replicas hold equal ones).
optim::Optimizer make_optimizer(FsdpEngine& engine, const optim::OptimizerConfig& cfg);

}  // namespace shardtrain::fsdp
