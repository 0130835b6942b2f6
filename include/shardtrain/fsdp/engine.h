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
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "shardtrain/comm/process_groups.h"
#include "shardtrain/fsdp/flat_unit.h"
#include "shardtrain/fsdp/gradient_reducer.h"
#include "shardtrain/fsdp/peak_tracker.h"
#include "shardtrain/fsdp/phase_clock.h"
#include "shardtrain/fsdp/sharding.h"
#include "shardtrain/fsdp/unit_builder.h"
#include "shardtrain/io/safetensors.h"
#include "shardtrain/model/batch.h"
#include "shardtrain/model/llama.h"
#include "shardtrain/optim/optimizer.h"
#include "shardtrain/runtime/phases.h"

namespace shardtrain::fsdp {

// Bytes per rank: persistent (the trainable parameters' fp32 master, exp_avg, exp_avg_sq,
// no-sync buffers, and a LoRA run's frozen base in the compute dtype) and the fp32 gradient
// shards, which exist only from the step's first reduction to the optimizer step, beside the
// figure one unsharded replica would need (16 bytes per trainable parameter, plus the base).
// Under LoRA the trainable parameters are the adapters: param/grad/optimizer_bytes are theirs.
struct MemoryReport {
  int64_t param_bytes = 0, grad_bytes = 0, optimizer_bytes = 0, unsharded_bytes = 0, padding_elements = 0;
  int64_t no_sync_bytes = 0;  // the unsharded gradient buffers of no_sync_accumulation
  int64_t base_bytes = 0;     // LoRA: the frozen base shard in the compute dtype; 0 otherwise
  int64_t trainable_bytes() const { return param_bytes + optimizer_bytes + no_sync_bytes; }  // persistent
  int64_t persistent() const { return trainable_bytes() + base_bytes; }
};

// What a step's forward and backward produced; the gradients stay in the shards (pieces()).
struct GradResult {
  at::Tensor loss_t;   // 0-d fp64 on the device: the mean over the global batch's loss tokens, reduced
  double loss = 0;     // loss_t read on the host, when forward_backward was asked to (read_loss)
  int64_t tokens = 0;  // loss tokens in the global batch
  runtime::PhaseTimes phases;   // forward, backward and the exposed communication inside them
  std::shared_ptr<PhaseClock> clock;  // !read_loss: the phases, read later (clock->finish()), not here
  std::array<int64_t, runtime::kNumPhases> peak_bytes{};  // forward and backward: see take_phase_peak()
};

class FsdpEngine {
 public:
  // Weights: the seeded init (identical at any world size), or `weights` read shard by shard.
  // With cfg.lora enabled, the base is frozen and the trainable pieces are the adapters: seeded
  // (PEFT's init), or read from `adapters` (PEFT's adapter_model.safetensors keys).
  FsdpEngine(model::ModelConfig model, FsdpConfig cfg, comm::ProcessGroups& groups, uint64_t seed,
             const io::SafetensorsModel* weights = nullptr, at::Device device = at::kCPU,
             const io::SafetensorsModel* adapters = nullptr);
  FsdpEngine(const FsdpEngine&) = delete;  // the peak tracker reads through `this`
  FsdpEngine& operator=(const FsdpEngine&) = delete;

  // Forward and backward over this rank's micro-batches (rows may be 0: the rank still joins
  // every collective). Leaves the reduced, sharded fp32 gradients for grad_shards().
  // read_loss = false keeps the loss on the device (GradResult::loss_t): no host synchronisation.
  GradResult forward_backward(const std::vector<model::Batch>& micro_batches, bool read_loss = true);
  // Forward only, on this rank's tokens [B, T] (positions: Batch::positions); on the host, or
  // where the engine computes (on_host = false: validation's loss, without copying logits).
  at::Tensor logits(const at::Tensor& tokens, const at::Tensor& positions = {}, bool on_host = true);
  double sum_world(double v) { return groups_.world->all_reduce_sum(v); }
  int64_t sum_world_on_host(int64_t v);  // an MPI all-reduce of a host count: no device involved
  double comm_wait_seconds() const;  // host time blocked on collectives so far, all groups
  // The most memory held since the last call. On a GPU, the caching allocator's peak (every
  // tensor); on CPU, the bytes the engine itself holds: shards, optimizer state, gathered units,
  // gradient shards and reductions in flight (activations are not counted there).
  int64_t take_phase_peak();
  MemoryPeaks end_step_peaks() { return peaks_.end_step(); }  // the step's: the largest of its phases'
  MemoryPeaks run_peaks() const { return peaks_.run(); }       // the run's: the largest of its steps'
  bool phase_peak_is_device() const { return device_.is_cuda(); }

  // Every base parameter, unsharded, fp32 (an all-gather per unit over the shard group).
  std::map<std::string, at::Tensor> full_parameters();
  std::map<std::string, at::Tensor> full_adapters();  // LoRA: every adapter, unsharded, fp32
  bool lora() const { return cfg_.lora.enabled(); }
  // What trains and what checkpoints hold: the model's parameters, or a LoRA run's adapters.
  const std::vector<model::ParamSpec>& trainable_specs() const { return trainable_specs_; }
  // LoRA: (param_offset, numel, CRC-32 of the fp32 values) of this rank's piece of each base
  // parameter as read at construction, one row per llama_param_specs entry (none held: -1); combined
  // over the shard group into one checksum of the base (ckpt::base_crc32).
  const std::vector<runtime::CrcRow>& base_crc_rows() const { return base_crc_rows_; }
  const std::vector<ShardPiece>& pieces() const { return pieces_; }  // this rank's trainable ones, in model order
  std::vector<at::Tensor> grad_shards();  // pieces()' gradients after forward_backward, same order
  void release_grads();                   // frees the gradient shards (after the optimizer step)
  MemoryReport memory() const;
  const comm::ProcessGroups& groups() const { return groups_; }
  const model::ModelConfig& model() const { return model_; }
  const FsdpConfig& config() const { return cfg_; }
  const at::Device& device() const { return device_; }
  std::vector<FlatUnit>& units() { return units_; }  // the base (frozen under LoRA)
  std::vector<FlatUnit>& adapters() { return adapters_; }  // LoRA: [units], empty for embedding and head
  int peak_gathered_units() const { return peak_gathered_; }  // the most units gathered at once

 private:
  // One forward/backward over a micro-batch: the detached input leaf and the output of every unit, [units].
  struct Pass {
    std::vector<at::Tensor> inputs, outputs;
    bool empty = false;          // this rank has no rows: it still joins every collective
    bool train = false;          // LoRA dropout applies
    std::vector<uint64_t> row_seeds;  // [B] LoRA dropout's, the same in forward and in the recompute
    bool fused_head = false;     // the head returns the final norm's output; the loss applies lm_head (lm_loss.h)
    at::Tensor head_weight;      // fused_head: lm_head's view from the same split as the norm's (one gradient buffer)
    model::TokenLayout layout;   // positions and documents, for forward and the recompute
  };
  at::Tensor forward(Pass& p, const at::Tensor& tokens, const at::Tensor& positions, bool build_graph);
  std::vector<uint64_t> dropout_row_seeds(const model::Batch& mb);  // Pass::row_seeds for a training micro-batch
  void backward(Pass& p, const at::Tensor& loss, bool reduce_now);
  at::Tensor run_unit(int64_t u, const at::Tensor& x, const Pass& p);
  // tie_word_embeddings: the head multiplies by the embedding unit's matrix, gathered for it.
  bool reads_embedding(int64_t u) const;
  void gather_tied_embedding();
  at::Tensor lm_head_view() const;  // lm_head.weight's view, or the tied embedding's; gathered
  // What each unit has, decided once at construction: its base, its adapters (LoRA's decoder
  // layers), which of them trains, and whether its backward runs at all.
  struct UnitParts {
    FlatUnit* base = nullptr;
    FlatUnit* adapter = nullptr;    // gathered and freed with the base; nullptr: none
    FlatUnit* trainable = nullptr;  // the base, or under LoRA the adapters (empty: the unit trains nothing)
    bool input_grad = false;        // a unit before it trains: its input needs a gradient
    bool runs_backward = false;     // it trains, or hands a gradient on to a unit that does
  };
  void assign_parts();
  bool base_frozen() const { return !adapters_.empty(); }  // LoRA: the adapters train, the base does not
  FlatUnit& trainable(int64_t u) { return *parts_[u].trainable; }
  const FlatUnit& trainable(int64_t u) const { return *parts_[u].trainable; }
  template <class F>
  void for_each_part(int64_t u, F f) {
    f(*parts_[u].base);
    if (parts_[u].adapter) f(*parts_[u].adapter);
  }
  std::map<std::string, at::Tensor> gather_full(std::vector<FlatUnit>& units);
  bool recomputes(int64_t u) const;  // activation checkpointing: a decoder layer keeps no graph
  void ensure(int64_t unit);
  void prefetch(int64_t unit);
  void prefetch_from(int64_t unit, int direction);  // up to the in-flight limit, ahead of `unit`
  void note_gathered();
  MemoryPeaks read_and_reset_peak();  // the allocator's (GPU) or the engine's (CPU) peak since the last read
  void note_memory();       // updates the phase peak from what the engine holds now
  int64_t held_bytes() const;
  void reduce_unit(int64_t unit, const at::Tensor& full_grad, bool owned);  // issues, does not wait
  void reduce_accumulated();

  model::ModelConfig model_;
  FsdpConfig cfg_;
  comm::ProcessGroups& groups_;
  at::Device device_;
  model::Rotary rope_;
  std::vector<FlatUnit> units_;         // [num_layers + 2], model_units() order
  std::vector<FlatUnit> adapters_;      // LoRA: [num_layers + 2]; empty otherwise
  std::vector<UnitParts> parts_;        // [units], pointing into units_ and adapters_
  std::vector<model::ParamSpec> trainable_specs_;
  std::vector<runtime::CrcRow> base_crc_rows_;
  bool backward_ = false;               // in backward(): a LoRA run skips the frozen embedding
  uint64_t seed_ = 0;      // LoRA dropout's masks come from it and each row's sample (model::dropout_row_seeds)
  uint64_t unnamed_passes_ = 0;  // batches without sample ids (tests, tools): each pass draws its own masks
  std::vector<ShardPiece> pieces_;      // this rank's pieces of every unit's shard
  std::vector<std::pair<std::string, std::string>> nvtx_names_;  // [units]: "fwd unit 3", "bwd unit 3"
  std::vector<at::Tensor> no_sync_;     // [units] fp32 [padded], with no_sync_accumulation
  GradientReducer reducer_;             // reductions issued and not yet added to the gradient shards
  int peak_gathered_ = 0;
  int64_t phase_peak_ = 0;  // CPU: the most held_bytes() since take_phase_peak()
  PeakTracker peaks_;       // phases, steps and the run, from read_and_reset_peak()
  int64_t persistent_bytes_ = 0;  // memory().persistent(), which does not change after construction
};

// The optimizer component for an engine: AdamW over this rank's master shards, the gradient
// norm summed across the shard group (whose shards tile the model; replicas hold equal ones).
optim::Optimizer make_optimizer(FsdpEngine& engine, const optim::OptimizerConfig& cfg);

}  // namespace shardtrain::fsdp
