#include "shardtrain/comm/process_groups.h"

#include "shardtrain/comm/mpi_communicator.h"
#include "shardtrain/runtime/error.h"

namespace shardtrain::comm {

Sharding parse_sharding(const std::string& s) {
  if (s == "full_shard") return Sharding::kFullShard;
  if (s == "shard_grad_op") return Sharding::kShardGradOp;
  if (s == "no_shard") return Sharding::kNoShard;
  if (s == "hybrid_shard") return Sharding::kHybridShard;
  if (s == "hybrid_shard_zero2") return Sharding::kHybridShardZero2;
  throw UsageError("--sharding must be full_shard, shard_grad_op, no_shard, hybrid_shard or hybrid_shard_zero2, got '" +
                   s + "'");
}

const char* sharding_name(Sharding s) {
  switch (s) {
    case Sharding::kFullShard: return "full_shard";
    case Sharding::kShardGradOp: return "shard_grad_op";
    case Sharding::kNoShard: return "no_shard";
    case Sharding::kHybridShard: return "hybrid_shard";
    default: return "hybrid_shard_zero2";
  }
}

bool reshard_after_forward(Sharding s) { return s == Sharding::kFullShard || s == Sharding::kHybridShard; }
bool is_hybrid(Sharding s) { return s == Sharding::kHybridShard || s == Sharding::kHybridShardZero2; }

GroupLayout group_layout(Sharding s, const Topology& t, int shard_group_size) {
  GroupLayout g;
  const int r = t.rank, w = t.world;
  if (shard_group_size < 0) throw UsageError("--shard-group-size must be >= 0 (0: one node)");
  if (shard_group_size > 0 && !is_hybrid(s))
    throw UsageError("--shard-group-size applies to hybrid_shard and hybrid_shard_zero2, not " +
                     std::string(sharding_name(s)));
  if (s == Sharding::kFullShard || s == Sharding::kShardGradOp) {
    g.shard_size = w, g.shard_rank = r, g.replicate_color = r;
    return g;
  }
  if (s == Sharding::kNoShard) {
    g.shard_color = r, g.replicate_size = w, g.replicate_rank = r;
    return g;
  }
  if (shard_group_size > 0) {
    if (w % shard_group_size != 0)
      throw UsageError("--shard-group-size " + std::to_string(shard_group_size) + " does not divide the " +
                       std::to_string(w) + " ranks; pick a divisor of the world size");
    const int S = shard_group_size;
    g.shard_size = S, g.shard_color = r / S, g.shard_rank = r % S;
    g.replicate_size = w / S, g.replicate_color = r % S, g.replicate_rank = r / S;
    return g;
  }
  if (t.local_size * t.num_nodes != w)
    throw UsageError("hybrid sharding needs the same number of ranks on every node (" + std::to_string(w) + " ranks on " +
                     std::to_string(t.num_nodes) + " nodes); set --ranks-per-node or --shard-group-size");
  g.shard_size = t.local_size, g.shard_color = t.node, g.shard_rank = t.local_rank;
  g.replicate_size = t.num_nodes, g.replicate_color = t.local_rank, g.replicate_rank = t.node;
  return g;
}

namespace {
MpiComm split(int color, int key) {
  MPI_Comm c;
  MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, color, key, &c));
  return MpiComm(c);
}
}  // namespace

ProcessGroups make_groups(Sharding s, const Topology& topo, int shard_group_size, const Backend& backend) {
  ProcessGroups pg;
  pg.layout = group_layout(s, topo, shard_group_size);
  pg.world = backend(split(0, topo.rank), "world");
  pg.shard = backend(split(pg.layout.shard_color, pg.layout.shard_rank), "shard");
  pg.replicate = backend(split(pg.layout.replicate_color, pg.layout.replicate_rank), "replicate");
  if (pg.shard->size() != pg.layout.shard_size || pg.replicate->size() != pg.layout.replicate_size)
    throw Error("process groups disagree with the layout: MPI made shard " + std::to_string(pg.shard->size()) +
                " / replicate " + std::to_string(pg.replicate->size()) + " ranks");
  return pg;
}

ProcessGroups make_mpi_groups(Sharding s, const Topology& topo, int shard_group_size) {
  return make_groups(s, topo, shard_group_size,
                     [](MpiComm c, const char* name) { return std::make_unique<MpiCommunicator>(std::move(c), name); });
}

}  // namespace shardtrain::comm
