// The FSDP engine: PyTorch FSDP's semantics over the Communicator interface. Each decoder layer
// is a unit, and so are the embeddings and the final norm + lm_head. Forward and backward run
// unit by unit: gather, compute, free (or keep), and in backward gather again, compute,
// reduce-scatter the gradient, free. Each rank keeps only its shards of the fp32 master
// weights, the gradients and the AdamW state.
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "shardtrain/comm/process_groups.h"
#include "shardtrain/data/token_file.h"
#include "shardtrain/fsdp/flat_unit.h"
#include "shardtrain/io/safetensors.h"
#include "shardtrain/model/llama.h"
#include "shardtrain/train/adamw.h"
#include "shardtrain/train/trainer.h"

namespace shardtrain::fsdp {

struct FsdpConfig {
  comm::Sharding sharding = comm::Sharding::kFullShard;
  at::ScalarType param_dtype = at::kFloat;   // compute and all-gather dtype
  at::ScalarType reduce_dtype = at::kFloat;  // gradient reduction dtype
  bool activation_checkpointing = false;     // recompute each decoder layer in backward
  // false: keep unsharded fp32 gradients across micro-steps and reduce once per step; costs
  // 4 bytes x all parameters per rank (the unsharded gradient), like PyTorch FSDP's no_sync.
  bool sync_each_microstep = true;
  bool prefetch = true;  // gather the next unit (forward) / previous unit (backward) early
  // Units gathered at once, the one computing included, like PyTorch FSDP's limit_all_gathers:
  // 2 prefetches one unit ahead; each more gathers one unit further ahead and costs its memory.
  int max_inflight_gathers = 2;
  at::Device device = at::kCPU;  // where shards, gathers and compute live (cuda: NCCL groups)
  double grad_clip = 1.0;
  AdamWConfig adamw;
};

// Persistent bytes per rank (fp32 master, gradient, exp_avg, exp_avg_sq) beside the figure
// one unsharded replica would need.
struct MemoryReport {
  int64_t param_bytes = 0, grad_bytes = 0, optimizer_bytes = 0, unsharded_bytes = 0, padding_elements = 0;
  int64_t no_sync_bytes = 0;  // the unsharded gradient buffers of sync_each_microstep = false
  int64_t persistent() const { return param_bytes + grad_bytes + optimizer_bytes + no_sync_bytes; }
};

// A piece of one parameter held by this rank, with its optimizer state: what checkpoints save
// and load. The tensors are views into the persistent shards.
struct StatePiece {
  std::string name;
  std::vector<int64_t> shape;          // the parameter's logical shape
  int64_t param_offset = 0, numel = 0;  // flat range of the parameter
  at::Tensor master, exp_avg, exp_avg_sq;  // [numel] fp32 views
};

class FsdpEngine {
 public:
  // Weights: the seeded init (identical at any world size), or `weights` read shard by shard.
  FsdpEngine(ModelConfig model, FsdpConfig cfg, comm::ProcessGroups& groups, uint64_t seed,
             const SafetensorsModel* weights = nullptr);

  StepResult step(const std::vector<Batch>& micro_batches, double lr);
  double comm_wait_seconds() const;  // host time blocked on collectives so far, all groups
  // Forward only, every rank on its part of the batch; sums across the world.
  EvalResult evaluate(const TokenFile& data, int64_t batch_size, int64_t max_batches);
  at::Tensor logits(const at::Tensor& tokens);  // forward only, on this rank's tokens

  // Every parameter, unsharded (an all-gather per unit over the shard group).
  std::map<std::string, at::Tensor> full_parameters();
  MemoryReport memory() const;
  const comm::ProcessGroups& groups() const { return groups_; }
  const ModelConfig& model() const { return model_; }
  const FsdpConfig& config() const { return cfg_; }
  std::vector<FlatUnit>& units() { return units_; }
  std::vector<StatePiece> state_pieces();  // this rank's pieces, every parameter in model order
  AdamW& optimizer() { return opt_; }
  int peak_gathered_units() const { return peak_gathered_; }  // the most units gathered at once

 private:
  struct Pass;  // one forward/backward over a micro-batch
  at::Tensor forward(Pass& p, const at::Tensor& tokens, bool build_graph);
  void backward(Pass& p, const at::Tensor& loss, bool reduce_now);
  void ensure(int64_t unit);
  void prefetch(int64_t unit);
  void prefetch_from(int64_t unit, int direction);  // up to the in-flight limit, ahead of `unit`
  void note_gathered();
  void reduce_unit(int64_t unit, const at::Tensor& full_grad);
  void reduce_accumulated();
  LayerWeights layer_weights(int64_t unit) const;

  ModelConfig model_;
  FsdpConfig cfg_;
  comm::ProcessGroups& groups_;
  Rotary rope_;
  std::vector<FlatUnit> units_;      // [num_layers + 2]
  std::vector<at::Tensor> unit_grads_;  // [units]: each unit's persistent fp32 gradient shard
  std::vector<at::Tensor> grad_views_;  // this rank's pieces of those, in the optimizer's order
  std::vector<std::pair<std::string, std::string>> nvtx_names_;  // [units]: "fwd unit 3", "bwd unit 3"
  std::vector<at::Tensor> no_sync_;  // [units] fp32 [padded], when !sync_each_microstep
  AdamW opt_;
  int peak_gathered_ = 0;
};

}  // namespace shardtrain::fsdp
