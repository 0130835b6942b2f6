// Pure FSDP arithmetic: group membership for every strategy, and flat-unit padding and shards.
#include <gtest/gtest.h>

#include <set>

#include "shardtrain/fsdp/sharding.h"
#include "shardtrain/fsdp/flat_layout.h"
#include "shardtrain/runtime/error.h"

using namespace shardtrain;
using namespace shardtrain::fsdp;

namespace {
Topology topo(int rank, int world, int per_node) { return topology_from_ranks_per_node(rank, world, per_node); }
}  // namespace

TEST(Groups, FullShardAndNoShardAreOppositeEnds) {
  auto f = group_layout(Sharding::kFullShard, topo(3, 4, 4), 0);
  EXPECT_EQ(f.shard_size, 4);
  EXPECT_EQ(f.shard_rank, 3);
  EXPECT_EQ(f.replicate_size, 1);
  auto n = group_layout(Sharding::kNoShard, topo(3, 4, 4), 0);
  EXPECT_EQ(n.shard_size, 1);
  EXPECT_EQ(n.replicate_size, 4);
  EXPECT_EQ(n.replicate_rank, 3);
}

TEST(Groups, HybridShardsInsideNodesAndReplicatesAcross) {
  std::set<std::pair<int, int>> shard_slots, rep_slots;
  for (int r = 0; r < 8; ++r) {
    auto g = group_layout(Sharding::kHybridShard, topo(r, 8, 4), 0);  // 2 nodes x 4 ranks
    EXPECT_EQ(g.shard_size, 4);
    EXPECT_EQ(g.shard_color, r / 4) << "a node is a shard group";
    EXPECT_EQ(g.replicate_size, 2);
    EXPECT_EQ(g.replicate_color, r % 4) << "same local rank across nodes";
    EXPECT_TRUE(shard_slots.insert({g.shard_color, g.shard_rank}).second);
    EXPECT_TRUE(rep_slots.insert({g.replicate_color, g.replicate_rank}).second);
  }
  auto g = group_layout(Sharding::kHybridShardZero2, topo(5, 8, 8), 2);  // --shard-group-size 2
  EXPECT_EQ(g.shard_size, 2);
  EXPECT_EQ(g.shard_color, 2);
  EXPECT_EQ(g.replicate_size, 4);
  EXPECT_EQ(g.replicate_rank, 2);
}

TEST(Groups, SizesThatDoNotDivideAreUsageErrors) {
  EXPECT_THROW(group_layout(Sharding::kHybridShard, topo(0, 6, 6), 4), UsageError);
  EXPECT_THROW(group_layout(Sharding::kFullShard, topo(0, 4, 4), 2), UsageError);  // not hybrid
  EXPECT_THROW(topology_from_ranks_per_node(0, 6, 4), UsageError);
  EXPECT_THROW(parse_sharding("zero3"), UsageError);
  EXPECT_TRUE(reshard_after_forward(parse_sharding("hybrid_shard")));
  EXPECT_FALSE(reshard_after_forward(parse_sharding("shard_grad_op")));
}

TEST(FlatLayout, PaddedToTheShardGroupAndTiledBySegments) {
  auto specs = llama_param_specs(model_preset("tiny"));
  for (int S : {1, 2, 3, 4, 7}) {
    for (int64_t unit = 0; unit < 4; ++unit) {
      auto l = fsdp::flat_layout(specs, unit, S);
      EXPECT_EQ(l.padded % S, 0);
      EXPECT_LT(l.padded - l.numel, S);
      std::vector<int64_t> covered(l.numel, 0);
      for (int r = 0; r < S; ++r)
        for (const auto& s : fsdp::shard_segments(l, r)) {
          EXPECT_EQ(l.entries[s.entry].offset + s.param_offset, r * l.shard_numel + s.shard_offset);
          for (int64_t i = 0; i < s.numel; ++i) covered[l.entries[s.entry].offset + s.param_offset + i]++;
        }
      for (int64_t c : covered) ASSERT_EQ(c, 1) << "every element in exactly one shard";
    }
  }
  auto layer = fsdp::flat_layout(specs, 1, 1);
  EXPECT_EQ(layer.entries.size(), 9u);  // q k v o gate up down and two norms
  EXPECT_EQ(fsdp::flat_layout(specs, 3, 1).entries.size(), 2u);  // norm + lm_head
}
