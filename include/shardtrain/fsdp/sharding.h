// The sharding concern: PyTorch FSDP's strategies and mixed-precision options, parsed by the
// CLI straight into ShardingConfig and checked once by validate(); and which ranks form the shard
// and replicate groups under each strategy (pure arithmetic, unit-tested). What each unit computes
// is not sharding's: model::RunPlan.
#pragma once
#include <ATen/core/ScalarType.h>

#include <string>

#include "shardtrain/comm/parallel_dims.h"
#include "shardtrain/fsdp/activation_checkpointing.h"
#include "shardtrain/runtime/enum_names.h"
#include "shardtrain/runtime/mpi_env.h"

namespace shardtrain::fsdp {

enum class Sharding { kFullShard, kShardGradOp, kNoShard, kHybridShard, kHybridShardZero2 };
inline constexpr runtime::EnumName<Sharding> kShardingNames[] = {
    {Sharding::kFullShard, "full_shard"},
    {Sharding::kShardGradOp, "shard_grad_op"},
    {Sharding::kNoShard, "no_shard"},
    {Sharding::kHybridShard, "hybrid_shard"},
    {Sharding::kHybridShardZero2, "hybrid_shard_zero2"}};
Sharding parse_sharding(const std::string& s);  // throws UsageError naming --sharding
const char* sharding_name(Sharding s);
// PyTorch FSDP's reshard_after_forward: free the gathered parameters after each unit's forward.
bool reshard_after_forward(Sharding s);
bool is_hybrid(Sharding s);

struct ShardingConfig {
  Sharding sharding = Sharding::kFullShard;
  int shard_group_size = 0;     // hybrid: ranks per shard group; 0: one node
  int ranks_per_node = 0;       // topology override (simulated nodes); 0: ask MPI
  std::string device = "auto";  // auto: local_rank's GPU if any, else cpu; cuda; cpu
  // Compute and all-gather dtype (master stays fp32). Undefined (--param-dtype auto, the CLI's
  // default): bf16 on CUDA, fp32 on CPU, resolved by the engine for its device.
  at::ScalarType param_dtype = at::kFloat;
  at::ScalarType reduce_dtype = at::kFloat;  // gradient reduction dtype
  ActivationCheckpointing
      activation_checkpointing;  // which decoder layers recompute what in backward
  // Keep unsharded fp32 gradients across micro-steps and reduce once per step; costs 4 bytes x
  // all parameters per rank (the unsharded gradient), like PyTorch FSDP's no_sync.
  bool no_sync_accumulation = false;
  bool prefetch = true;  // gather the next unit (forward) / previous unit (backward) early
  // Units gathered at once, the one computing included, like PyTorch FSDP's limit_all_gathers:
  // 2 prefetches one unit ahead; each more gathers one unit further ahead and costs its memory.
  int max_inflight_gathers = 2;
  // --expert-parallel: a mixture of experts' experts split over groups of this many ranks of each
  // shard group, tokens sent to them by all-to-all (comm::with_experts; docs/moe.md). 1: off.
  int expert_parallel = 1;
  // --cpu-offload: the fp32 master shards, AdamW's moments and the gradient shards live in host
  // memory (pinned beside a GPU) and AdamW steps on the CPU, unit by unit (docs/fsdp.md).
  bool cpu_offload = false;
  void validate() const;  // throws UsageError naming the option to change
};

// --device (train, eval, generate, preflight): auto, cpu or cuda; throws UsageError otherwise.
void check_device_option(const std::string& spec);

// Pure: the data-parallel groups of `rank` (comm::with_context adds the context dimension).
// Hybrid strategies shard within a node (topology.local_size ranks) unless shard_group_size > 0
// picks contiguous blocks of that size. Throws UsageError, with the same message on every rank,
// when the sizes do not divide.
comm::GroupLayout group_layout(Sharding s, const runtime::Topology& topo, int shard_group_size);

// The strategy's groups as MPI communicators (tests, tools): no context dimension.
comm::ParallelDims make_mpi_groups(Sharding s, const runtime::Topology& topo, int shard_group_size);

}  // namespace shardtrain::fsdp
