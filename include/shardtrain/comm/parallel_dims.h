// The device mesh, built before anything else and handed to whatever needs ranks: the world, the
// shard group (parameters are split across it), the replicate group (holds copies) and the
// context group (the ranks that share each sequence under context parallelism: a ring of N
// consecutive ranks) and, under expert parallelism, the expert group (N consecutive ranks of a
// shard group that split a sparse layer's experts and send tokens to them) and the expert shard
// group (the ranks of a shard group that hold the same experts: their parameters shard over it,
// torchtitan's dp_shard_mod_ep), made from MPI alone (MPI_Comm_split). The data-parallel layout
// is the sharding strategy's (fsdp::group_layout); with_context and with_experts add the other
// dimensions and check which sizes divide which.
#pragma once
#include <array>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "shardtrain/comm/communicator.h"
#include "shardtrain/runtime/mpi_env.h"

namespace shardtrain::comm {

struct GroupLayout {
  int shard_size = 1, shard_color = 0, shard_rank = 0;
  int replicate_size = 1, replicate_color = 0, replicate_rank = 0;
  int context_size = 1, context_color = 0, context_rank = 0;
  int expert_size = 1, expert_color = 0, expert_rank = 0;
  int expert_shard_size = 1, expert_shard_color = 0, expert_shard_rank = 0;
  // The (color, key) MPI_Comm_split takes for the group of that name (shard, replicate, context,
  // expert, expert_shard).
  std::pair<int, int> color_key(const std::string& group) const;
};

struct ParallelDims {
  GroupLayout layout;
  std::unique_ptr<Communicator> world, shard, replicate, context;
  // Expert parallelism (layout.expert_size > 1); null otherwise. The experts' replicas are the
  // replicate group's: an expert group lies inside a shard group.
  std::unique_ptr<Communicator> expert, expert_shard;
  // The data-parallel position: the ranks of a context group share their rows (one data rank).
  int data_rank() const { return layout.context_color; }
  int data_world() const { return world->size() / context->size(); }
  int shard_size() const { return layout.shard_size; }
  int replicate_size() const { return layout.replicate_size; }
  int context_size() const { return layout.context_size; }
  int expert_size() const { return layout.expert_size; }
  std::array<Communicator*, 4> all() const {
    return {world.get(), shard.get(), replicate.get(), context.get()};
  }  // in that order
  // all() and, under expert parallelism, the expert and expert shard groups.
  std::vector<Communicator*> every() const;
  std::shared_ptr<void> watchdog;  // declared last: stops before the communicators are destroyed
};

// The strategy's layout with the context dimension: rings of n consecutive ranks of a node,
// inside the shard group (n = 1: none). Throws UsageError naming --context-parallel, the same
// on every rank, where the ranks cannot form them.
GroupLayout with_context(GroupLayout layout, const runtime::Topology& topo, int n);

// The layout with the expert dimension: groups of n consecutive ranks of each shard group split
// the experts (n = 1: none); the shard group's ranks that hold the same experts form the expert
// shard group. Throws UsageError naming --expert-parallel, the same on every rank, where n does
// not divide the shard group (no_shard's is one rank: nothing to split the experts over).
GroupLayout with_experts(GroupLayout layout, int n);

// A layout whose context group has one rank (no context parallelism) gets it whatever its
// context color says: each rank alone, so layouts written without the context fields hold.
GroupLayout with_lone_context(GroupLayout layout, const runtime::Topology& topo);

// The groups split from MPI_COMM_WORLD by the layout, each wrapped by `backend` (MPI or NCCL).
using Backend =
    std::function<std::unique_ptr<Communicator>(runtime::MpiComm group, const char* name)>;
ParallelDims make_groups(const GroupLayout& layout, const runtime::Topology& topo,
                         const Backend& backend);
ParallelDims make_mpi_groups(const GroupLayout& layout, const runtime::Topology& topo);

}  // namespace shardtrain::comm
