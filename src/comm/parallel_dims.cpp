#include "shardtrain/comm/parallel_dims.h"

#include "shardtrain/comm/mpi_communicator.h"
#include "shardtrain/runtime/error.h"

namespace shardtrain::comm {

namespace {
runtime::MpiComm split(int color, int key) {
  MPI_Comm c;
  MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, color, key, &c));
  return runtime::MpiComm(c);
}
}  // namespace

std::pair<int, int> GroupLayout::color_key(const std::string& group) const {
  if (group == "shard") return {shard_color, shard_rank};
  if (group == "replicate") return {replicate_color, replicate_rank};
  if (group == "context") return {context_color, context_rank};
  if (group == "expert") return {expert_color, expert_rank};
  if (group == "expert_shard") return {expert_shard_color, expert_shard_rank};
  throw runtime::Error("no process group named " + group);
}

GroupLayout with_context(GroupLayout g, const runtime::Topology& t, int n) {
  if (n < 1) throw runtime::UsageError("--context-parallel must be 1 or more (1: off)");
  if (n == 1) return g;  // each rank its own group: with_lone_context
  // A ring stays inside a node (NVLink), and inside the shard group where parameters are split.
  if (t.local_size % n != 0 || t.local_size * t.num_nodes != t.world)
    throw runtime::UsageError("--context-parallel " + std::to_string(n) +
                              " must divide the ranks per node (" + std::to_string(t.local_size) +
                              " here); pick a divisor, or set --ranks-per-node");
  if (g.shard_size > 1 && g.shard_size % n != 0)
    throw runtime::UsageError("--context-parallel " + std::to_string(n) +
                              " must divide the shard group (--shard-group-size " +
                              std::to_string(g.shard_size) + ")");
  g.context_size = n;
  g.context_color = t.node * (t.local_size / n) + t.local_rank / n;
  g.context_rank = t.local_rank % n;
  return g;
}

GroupLayout with_experts(GroupLayout g, int n) {
  if (n < 1) throw runtime::UsageError("--expert-parallel must be 1 or more (1: off)");
  if (n == 1) return g;
  if (g.shard_size % n != 0)
    throw runtime::UsageError(
        "--expert-parallel " + std::to_string(n) + " must divide the shard group (" +
        std::to_string(g.shard_size) +
        (g.shard_size == 1 ? " rank: no_shard splits nothing; use full_shard, shard_grad_op or "
                             "hybrid_shard"
                           : " ranks; pick a divisor, or change --shard-group-size") +
        ")");
  // Shard groups are blocks of consecutive ranks, so shard rank % n is the place in the expert
  // group and the ranks of a shard group at the same place hold the same experts.
  const int per_shard = g.shard_size / n;
  g.expert_size = n;
  g.expert_color = g.shard_color * per_shard + g.shard_rank / n;
  g.expert_rank = g.shard_rank % n;
  g.expert_shard_size = per_shard;
  g.expert_shard_color = g.shard_color * n + g.shard_rank % n;
  g.expert_shard_rank = g.shard_rank / n;
  return g;
}

std::vector<Communicator*> ParallelDims::every() const {
  std::vector<Communicator*> v(all().begin(), all().end());
  for (Communicator* c : {expert.get(), expert_shard.get()})
    if (c) v.push_back(c);
  return v;
}

GroupLayout with_lone_context(GroupLayout layout, const runtime::Topology& topo) {
  if (layout.context_size == 1) {
    layout.context_color = topo.rank;
    layout.context_rank = 0;
  }
  return layout;
}

ParallelDims make_groups(const GroupLayout& layout, const runtime::Topology& topo,
                         const Backend& backend) {
  ParallelDims pg;
  pg.layout = with_lone_context(layout, topo);
  pg.world = backend(split(0, topo.rank), "world");
  pg.shard = backend(split(pg.layout.shard_color, pg.layout.shard_rank), "shard");
  pg.replicate = backend(split(pg.layout.replicate_color, pg.layout.replicate_rank), "replicate");
  pg.context = backend(split(pg.layout.context_color, pg.layout.context_rank), "context");
  if (pg.layout.expert_size > 1) {
    pg.expert = backend(split(pg.layout.expert_color, pg.layout.expert_rank), "expert");
    pg.expert_shard =
        backend(split(pg.layout.expert_shard_color, pg.layout.expert_shard_rank), "expert_shard");
    if (pg.expert->size() != pg.layout.expert_size ||
        pg.expert_shard->size() != pg.layout.expert_shard_size)
      throw runtime::Error("process groups disagree with the layout: MPI made expert " +
                           std::to_string(pg.expert->size()) + " / expert shard " +
                           std::to_string(pg.expert_shard->size()) + " ranks");
  }
  if (pg.shard->size() != pg.layout.shard_size ||
      pg.replicate->size() != pg.layout.replicate_size ||
      pg.context->size() != pg.layout.context_size)
    throw runtime::Error("process groups disagree with the layout: MPI made shard " +
                         std::to_string(pg.shard->size()) + " / replicate " +
                         std::to_string(pg.replicate->size()) + " / context " +
                         std::to_string(pg.context->size()) + " ranks");
  return pg;
}

ParallelDims make_mpi_groups(const GroupLayout& layout, const runtime::Topology& topo) {
  return make_groups(layout, topo, [](runtime::MpiComm c, const char* name) {
    return std::make_unique<MpiCommunicator>(std::move(c), name);
  });
}

}  // namespace shardtrain::comm
