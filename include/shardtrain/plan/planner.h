// `shardtrain plan`: memory per rank and step time for a model, strategy and cluster size,
// from the engine's own memory arithmetic (fsdp/memory_model.h), its per-step collectives and
// a fabric's bus bandwidth. Equations and figures: docs/planner.md.
#pragma once
#include <string>
#include <vector>

#include "shardtrain/fsdp/memory_model.h"
#include "shardtrain/model/run_plan.h"
#include "shardtrain/plan/hardware.h"
#include "shardtrain/plan/objective.h"

namespace shardtrain::plan {

// What a run measured, to replace the defaults (--calibrate metrics.jsonl).
struct Calibration {
  std::string source;  // empty: the documented defaults
  double compute_tflops =
      0;  // achieved per device in forward + backward, exposed communication excluded
  double optimizer_s_per_element = 0;              // seconds per trainable shard element
  double forward_tflops = 0, backward_tflops = 0;  // the same rate, forward and backward apart
};
Calibration read_calibration(
    const std::string& metrics_file);  // throws UsageError naming --calibrate

struct PlanInput {
  model::ModelConfig model;
  fsdp::ShardingConfig fsdp;  // sharding is overridden per row
  model::RunPlan run;         // what each unit computes: adapters, fp8, fused layers, loss chunking
  GpuSpec gpu;
  Fabric fabric;
  Calibration calibration;
  int gpus_per_node = 8;
  std::vector<int> nodes;  // node counts, one row each per strategy
  std::vector<fsdp::Sharding> strategies;
  int64_t seq_len = 4096, batch_size = 1,
          grad_accum = 1;     // batch_size: rows (DPO: pairs) per rank per micro-batch
  bool packed = false;        // rows hold several documents (prepare --mode packing)
  double default_mfu = 0.37;  // compute efficiency without --calibrate (fms-fsdp, 7B, H100, eager)
  bool allowances = true;     // NCCL and allocator allowances (off for the CPU validation)
  double host_memory_bytes = 0;  // --host-memory-gib: per node, replaces the instance's; 0: its
  // --context-parallel: ranks of one node per context group (batch_size then counts rows per
  // group); not given: 1, and when nothing fits the plan names the smallest that does.
  int context_parallel = 1;
  bool context_parallel_given = false;
  Objective objective;    // --objective, --reference-logps (plan/objective.h)
  void validate() const;  // throws UsageError naming the option to change (plan's)
};

struct PlanRow {
  int nodes = 0, ranks = 0, shard_size = 0, replicas = 0;
  fsdp::Sharding sharding = fsdp::Sharding::kFullShard;
  // Memory per rank, bytes.
  fsdp::MemoryReport state;  // sharded state, every gradient shard included
  // At the step's peak. Gradient shards exist from their unit's first reduction to the optimizer
  // step, so only the units reduced by the peak's moment hold one: fewer when the peak falls early.
  int64_t grads_at_peak = 0, gathered = 0, reductions = 0, activations = 0;
  int64_t nccl = 0, allocator = 0;  // allowances
  int64_t staging = 0;      // --cpu-offload: shards copied from the host for gathers in flight
  int64_t tensor_peak = 0;  // every tensor at the peak (what a caching allocator reports)
  int64_t engine_peak = 0;  // the engine's own accounting (no activations)
  int64_t total = 0;        // tensor_peak + allowances
  // DPO's reference model (plan/objective.h): a frozen copy's persistent bytes on the device and,
  // with --cpu-offload, on the host; the tensors at its forward's peak (before the training
  // passes).
  int64_t reference = 0, reference_host = 0, reference_peak = 0;
  int gathered_units = 0;
  int context_parallel = 1;
  bool fits = false;    // the device's memory and, with --cpu-offload, the host's
  double headroom = 0;  // bytes left (negative: short by)
  // --cpu-offload: the offloaded state of the node's ranks against the host's memory (0: unknown).
  int64_t host_bytes_per_node = 0;
  double host_memory_bytes = 0;
  bool host_fits = true;
  // Step time, seconds per optimizer step. optimizer_s: the optimizer's share of step_s (with
  // --cpu-offload, what of the CPU's AdamW the next step's forward does not hide).
  double compute_s = 0, comm_s = 0, exposed_comm_s = 0, optimizer_s = 0, step_s = 0;
  // --cpu-offload: host-to-device and device-to-host copies in all, what of them the step waits
  // for, and the CPU's AdamW in all.
  double h2d_s = 0, d2h_s = 0, exposed_copy_s = 0, cpu_optimizer_s = 0;
  // --context-parallel: what of the ring's K/V and dK/dV transfers the step waits for.
  double ring_exposed_s = 0;
  // --expert-parallel: the tokens' all-to-alls to and from their experts' ranks (each sparse layer,
  // twice in forward, twice in backward, twice more in a recomputed forward), which the layer
  // waits for; and the bytes each rank sends per step.
  int expert_parallel = 1;
  double all_to_all_s = 0, all_to_all_bytes = 0;
  double reference_s = 0;  // DPO: the reference model's forward per micro-batch, in step_s
  double tokens_per_s_per_gpu = 0, mfu = 0,
         efficiency = 0;  // efficiency: against the fewest nodes' row of its strategy

  // Parameters, gradients and optimizer state once every gradient shard exists (at the optimizer
  // step): the same with or without activation checkpointing.
  int64_t sharded_state() const { return state.persistent() + state.grad_bytes; }
  int64_t state_at_peak() const { return state.persistent() + grads_at_peak; }
};

// The context-parallel ring of one decoder layer per micro-batch on one rank (0s at n = 1): bytes
// each rank sends, their time at the fabric's intra-node all-gather busbw (NVLink), and the block
// attention they hide behind: per ring step the causal half of (tokens per rank)^2, at the
// planner's rate. Backward: 2x the block's forward FLOPs; the last dK/dV hop always waits.
struct RingCost {
  int n = 1;
  int64_t tokens_per_rank = 0;                   // per row
  double kv_bytes = 0, dkv_bytes = 0;            // one hop: K/V in the compute dtype, dK/dV in fp32
  double forward_bytes = 0, backward_bytes = 0;  // (n-1) K/V; (n-1) K/V + n dK/dV
  double kv_s = 0, dkv_s = 0, busbw_gbps = 0;    // one hop each, and the busbw at kv_bytes
  double forward_s = 0, backward_s = 0;          // every hop, unhidden
  double block_forward_s = 0, block_backward_s = 0;      // one ring step's attention
  double exposed_forward_s = 0, exposed_backward_s = 0;  // what the blocks do not hide
  bool hidden = false;  // every hop but backward's last fits under its block
};
RingCost ring_cost(const PlanInput& in);

// One all-to-all of a sparse layer's tokens under --expert-parallel n (0s at n = 1): per
// micro-batch on one rank, its tokens times experts_per_token rows of hidden in the compute dtype,
// of which (n - 1) / n leave the rank; seconds at the fabric's all-gather busbw for that buffer
// over n ranks (inside a node while n <= gpus_per_node).
struct AllToAllCost {
  double bytes = 0, sent_bytes = 0, seconds = 0;
};
AllToAllCost all_to_all_cost(const PlanInput& in, int64_t tokens);

// Throws UsageError naming the option when a node count does not fit the shard group.
std::vector<PlanRow> plan_rows(const PlanInput& in);
// The row that fits with the most tokens/s per GPU (the cheapest per token), the fewest nodes
// among those within 1% of it; nullptr when nothing fits.
const PlanRow* best_row(const std::vector<PlanRow>& rows);
// A row that fits, in one phrase: "full_shard on 1 node(s), 1862 tokens/s per GPU, 54 GiB of 75
// GiB" (plan's best row, and the row a remedy fits).
std::string fit_summary(const PlanInput& in, const PlanRow& r);

}  // namespace shardtrain::plan
