#include "shardtrain/fsdp/sharding.h"

#include "shardtrain/runtime/error.h"

namespace shardtrain::fsdp {

Sharding parse_sharding(const std::string& s) {
  if (const auto v = runtime::parse_enum(kShardingNames, s)) return *v;
  throw runtime::UsageError("--sharding must be " + runtime::enum_choices(kShardingNames) +
                            ", got '" + s + "'");
}

const char* sharding_name(Sharding s) { return runtime::enum_name(kShardingNames, s); }

bool reshard_after_forward(Sharding s) {
  return s == Sharding::kFullShard || s == Sharding::kHybridShard;
}
bool is_hybrid(Sharding s) {
  return s == Sharding::kHybridShard || s == Sharding::kHybridShardZero2;
}

comm::GroupLayout group_layout(Sharding s, const runtime::Topology& t, int shard_group_size) {
  comm::GroupLayout g;
  const int r = t.rank, w = t.world;
  if (shard_group_size < 0)
    throw runtime::UsageError("--shard-group-size must be >= 0 (0: one node)");
  if (shard_group_size > 0 && !is_hybrid(s))
    throw runtime::UsageError(
        "--shard-group-size applies to hybrid_shard and hybrid_shard_zero2, not " +
        std::string(sharding_name(s)));
  if (s == Sharding::kFullShard || s == Sharding::kShardGradOp) {
    g.shard_size = w;
    g.shard_rank = r;
    g.replicate_color = r;
    return g;
  }
  if (s == Sharding::kNoShard) {
    g.shard_color = r;
    g.replicate_size = w;
    g.replicate_rank = r;
    return g;
  }
  if (shard_group_size > 0) {
    if (w % shard_group_size != 0)
      throw runtime::UsageError("--shard-group-size " + std::to_string(shard_group_size) +
                                " does not divide the " + std::to_string(w) +
                                " ranks; pick a divisor of the world size");
    const int S = shard_group_size;
    g.shard_size = S;
    g.shard_color = r / S;
    g.shard_rank = r % S;
    g.replicate_size = w / S;
    g.replicate_color = r % S;
    g.replicate_rank = r / S;
    return g;
  }
  if (t.local_size * t.num_nodes != w)
    throw runtime::UsageError("hybrid sharding needs the same number of ranks on every node (" +
                              std::to_string(w) + " ranks on " + std::to_string(t.num_nodes) +
                              " nodes); set --ranks-per-node or --shard-group-size");
  g.shard_size = t.local_size;
  g.shard_color = t.node;
  g.shard_rank = t.local_rank;
  g.replicate_size = t.num_nodes;
  g.replicate_color = t.local_rank;
  g.replicate_rank = t.node;
  return g;
}

void check_device_option(const std::string& spec) {
  if (spec != "auto" && spec != "cpu" && spec != "cuda")
    throw runtime::UsageError("--device must be auto, cpu or cuda");
}

void ShardingConfig::validate() const {
  // --shard-group-size is checked against the world by group_layout, the one place that knows it.
  if (ranks_per_node < 0) throw runtime::UsageError("--ranks-per-node must be >= 0 (0: ask MPI)");
  if (max_inflight_gathers < 1)
    throw runtime::UsageError("--max-inflight-gathers must be 1 or more (1: no prefetch)");
  check_device_option(device);
  if (expert_parallel < 1)
    throw runtime::UsageError("--expert-parallel must be 1 or more (1: off)");
  if (expert_parallel > 1 && cpu_offload)
    throw runtime::UsageError(
        "--cpu-offload with --expert-parallel: the experts' host steps are not built; drop one");
  const auto dtype_ok = [](at::ScalarType t) { return t == at::kFloat || t == at::kBFloat16; };
  if (!dtype_ok(param_dtype) && param_dtype != at::ScalarType::Undefined)
    throw runtime::UsageError("--param-dtype must be auto, fp32 or bf16");
  if (!dtype_ok(reduce_dtype)) throw runtime::UsageError("--reduce-dtype must be fp32 or bf16");
}

comm::ParallelDims make_mpi_groups(Sharding s, const runtime::Topology& topo,
                                   int shard_group_size) {
  return comm::make_mpi_groups(group_layout(s, topo, shard_group_size), topo);
}

}  // namespace shardtrain::fsdp
