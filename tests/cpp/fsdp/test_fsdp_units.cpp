// Pure FSDP arithmetic: group membership for every strategy, and flat-unit padding and shards.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "shardtrain/fsdp/sharding.h"
#include "shardtrain/fsdp/flat_layout.h"
#include "shardtrain/fsdp/memory_model.h"
#include "shardtrain/fsdp/peak_tracker.h"
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

TEST(MemoryModel, ShardedStateIsSixteenBytesPerParameterOverTheGroup) {
  const ModelConfig m = model_preset("llama2-7b");
  const auto units = unit_sizes(m, llama_param_specs(m), 8);
  ASSERT_EQ(units.size(), static_cast<size_t>(m.num_layers + 2));
  int64_t numel = 0;
  for (const auto& u : units) {
    EXPECT_EQ(u.padded % 8, 0);
    EXPECT_EQ(u.shard_numel * 8, u.padded);
    EXPECT_LT(u.padded - u.numel, 8);
    numel += u.numel;
  }
  EXPECT_EQ(numel, m.num_params());
  const PersistentBytes p = persistent_bytes(units, nullptr, false, 2);
  EXPECT_NEAR(static_cast<double>(p.param + p.grad + p.optimizer), 16.0 * m.num_params() / 8, 16.0 * units.size());
  EXPECT_EQ(p.unsharded, 16 * m.num_params());
  EXPECT_EQ(persistent_bytes(units, nullptr, true, 2).no_sync - p.no_sync, 4 * (numel + p.padding_elements * 1));
}

TEST(MemoryModel, GatheredUnitsFollowTheStrategyAndTheInflightLimit) {
  const ModelConfig m = model_preset("tiny");
  const auto units = unit_sizes(m, llama_param_specs(m), 4);
  const ActivationBytes act = activation_bytes_per_token(m, 4);
  const StepShape shape{2, 64, 1, 4, 4, 4};
  auto peak_units = [&](Sharding s, int inflight) {
    FsdpConfig c;
    c.sharding = s, c.max_inflight_gathers = inflight;
    return step_peak(units, nullptr, c, shape, act, 0).gathered_units;
  };
  EXPECT_EQ(peak_units(Sharding::kFullShard, 2), 2);  // the unit computing and the one prefetched
  EXPECT_EQ(peak_units(Sharding::kFullShard, 3), 3);
  EXPECT_EQ(peak_units(Sharding::kShardGradOp, 2), static_cast<int>(units.size()));  // kept from forward to backward
  FsdpConfig c;
  c.activation_checkpointing = true;
  const auto with_ac = step_peak(units, nullptr, c, shape, act, 0);
  c.activation_checkpointing = false;
  const auto without = step_peak(units, nullptr, c, shape, act, 0);
  EXPECT_LT(with_ac.activations, without.activations);
  EXPECT_EQ(with_ac.engine_bytes, without.engine_bytes);  // the engine's own bytes do not include activations
}

TEST(MemoryModel, ActivationBytesPerTokenCountWhatAutogradSaves) {
  const ModelConfig m = model_preset("tiny");  // h 64, i 176, 4 heads, 2 kv heads (kv width 32)
  const ActivationBytes a = activation_bytes_per_token(m, 4);
  EXPECT_EQ(a.layer, 4 * (8 * 64 + 2 * 32 + 4 * 176 + 4));  // 8h + k, v at kv width (enable_gqa) + 4i floats + 4 log-sum-exp
  EXPECT_EQ(a.layer_input, 4 * 64);
  EXPECT_EQ(a.logits_loss, 12 * m.vocab_size);
  EXPECT_GT(activation_bytes_per_token(m, 2).layer, a.layer / 2);  // bf16 keeps fp32 norm copies
}

namespace {
// A caching allocator's statistics as LibTorch keeps them: a peak that only a reset lowers, to
// what is allocated at the time of the reset.
struct FakeAllocator {
  int64_t current = 0, peak = 0;
  void alloc(int64_t n) { peak = std::max(peak, current += n); }
  void free(int64_t n) { current -= n; }
  fsdp::MemoryPeaks take() {
    const fsdp::MemoryPeaks p{peak, peak + 100};  // reserved: rounded up by the allocator
    peak = current;
    return p;
  }
};
}  // namespace

TEST(PeakTracker, StepPeakIsItsLargestPhaseNotItsLast) {
  FakeAllocator a;
  fsdp::PeakTracker t([&a] { return a.take(); });
  a.alloc(1000);  // sharded state, held throughout
  t.discard();
  a.alloc(500);   // forward: activations
  EXPECT_EQ(t.close_phase().allocated, 1500);
  a.alloc(300);   // backward: gradients while activations are freed
  a.free(500);
  EXPECT_EQ(t.close_phase().allocated, 1800);
  a.free(300);    // optimizer: only the state
  EXPECT_EQ(t.close_phase().allocated, 1300);  // the gradients, held at the reset; less than the step's peak
  const fsdp::MemoryPeaks step = t.end_step();
  EXPECT_EQ(step.allocated, 1800);
  EXPECT_EQ(step.reserved, 1900);
  // A smaller second step: its own peak is its own, the run's stays the first's.
  a.alloc(200);
  t.close_phase();
  a.free(200);
  t.close_phase();
  EXPECT_EQ(t.end_step().allocated, 1200);
  EXPECT_EQ(t.run().allocated, 1800);
  EXPECT_EQ(t.run().reserved, 1900);
}

TEST(PeakTracker, DiscardedMemoryCountsInNoStep) {
  FakeAllocator a;
  fsdp::PeakTracker t([&a] { return a.take(); });
  a.alloc(5000);  // validation or a save between steps
  a.free(5000);
  t.discard();
  a.alloc(10);
  t.close_phase();
  EXPECT_EQ(t.end_step().allocated, 10);
  EXPECT_EQ(t.run().allocated, 10);
}
