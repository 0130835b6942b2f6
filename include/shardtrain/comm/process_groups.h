// Process groups for each sharding strategy, made from MPI alone (MPI_Comm_split): the world,
// the shard group (parameters are split across it) and the replicate group (holds copies).
#pragma once
#include <array>
#include <functional>
#include <memory>
#include <string>

#include "shardtrain/comm/communicator.h"
#include "shardtrain/runtime/mpi_env.h"

namespace shardtrain::comm {

enum class Sharding { kFullShard, kShardGradOp, kNoShard, kHybridShard, kHybridShardZero2 };
Sharding parse_sharding(const std::string& s);  // throws UsageError naming --sharding
const char* sharding_name(Sharding s);
// PyTorch FSDP's reshard_after_forward: free the gathered parameters after each unit's forward.
bool reshard_after_forward(Sharding s);
bool is_hybrid(Sharding s);

struct GroupLayout {
  int shard_size = 1, shard_color = 0, shard_rank = 0;
  int replicate_size = 1, replicate_color = 0, replicate_rank = 0;
};

// Pure: the groups of `rank`. Hybrid strategies shard within a node (topology.local_size ranks)
// unless shard_group_size > 0 picks contiguous blocks of that size. Throws UsageError, with
// the same message on every rank, when the sizes do not divide.
GroupLayout group_layout(Sharding s, const Topology& topo, int shard_group_size);

struct ProcessGroups {
  GroupLayout layout;
  std::unique_ptr<Communicator> world, shard, replicate;
  std::array<Communicator*, 3> all() const { return {world.get(), shard.get(), replicate.get()}; }  // in that order
  std::shared_ptr<void> watchdog;  // declared last: stops before the communicators are destroyed
};

// The groups split from MPI_COMM_WORLD by the layout, each wrapped by `backend` (MPI or NCCL).
using Backend = std::function<std::unique_ptr<Communicator>(MpiComm group, const char* name)>;
ProcessGroups make_groups(Sharding s, const Topology& topo, int shard_group_size, const Backend& backend);
ProcessGroups make_mpi_groups(Sharding s, const Topology& topo, int shard_group_size);

}  // namespace shardtrain::comm
