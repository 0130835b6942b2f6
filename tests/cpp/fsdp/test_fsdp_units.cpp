// Pure FSDP arithmetic: group membership for every strategy, flat-unit padding and shards, and
// the memory model's terms. Expected sizes are worked out by hand for the tiny preset (written
// out below) or taken from published figures (Llama-2 7B's parameter count); the activation
// bytes per token are measured with the counting CPU allocator (runtime/host_tensor_memory.h)
// around a real decoder layer and loss.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "shardtrain/comm/parallel_dims.h"
#include "shardtrain/fsdp/flat_layout.h"
#include "shardtrain/fsdp/host_offload.h"
#include "shardtrain/fsdp/memory_model.h"
#include "shardtrain/fsdp/peak_tracker.h"
#include "shardtrain/fsdp/sharding.h"
#include "shardtrain/model/llama.h"
#include "shardtrain/model/run_plan.h"
#include "shardtrain/runtime/error.h"
#include "shardtrain/runtime/host_tensor_memory.h"

using namespace shardtrain;
using namespace shardtrain::fsdp;

namespace {
runtime::Topology topo(int rank, int world, int per_node) {
  return runtime::topology_from_ranks_per_node(rank, world, per_node);
}
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
  EXPECT_THROW(group_layout(Sharding::kHybridShard, topo(0, 6, 6), 4), runtime::UsageError);
  EXPECT_THROW(group_layout(Sharding::kFullShard, topo(0, 4, 4), 2),
               runtime::UsageError);  // not hybrid
  EXPECT_THROW(runtime::topology_from_ranks_per_node(0, 6, 4), runtime::UsageError);
  EXPECT_THROW(parse_sharding("zero3"), runtime::UsageError);
  EXPECT_TRUE(reshard_after_forward(parse_sharding("hybrid_shard")));
  EXPECT_FALSE(reshard_after_forward(parse_sharding("shard_grad_op")));
}

TEST(Groups, ExpertGroupsSplitEachShardGroupAndTheirSharesShardAcrossThem) {
  // full_shard over 8 ranks, experts split over 4: groups {0..3} {4..7}; the ranks at the same
  // place hold the same experts and shard them ({0, 4}, {1, 5}, ...).
  std::set<std::pair<int, int>> expert_slots, shard_slots;
  for (int r = 0; r < 8; ++r) {
    const auto g = comm::with_experts(group_layout(Sharding::kFullShard, topo(r, 8, 8), 0), 4);
    EXPECT_EQ(g.expert_size, 4);
    EXPECT_EQ(g.expert_color, r / 4);
    EXPECT_EQ(g.expert_rank, r % 4);
    EXPECT_EQ(g.expert_shard_size, 2);
    EXPECT_EQ(g.expert_shard_color, r % 4);
    EXPECT_EQ(g.expert_shard_rank, r / 4);
    EXPECT_TRUE(expert_slots.insert({g.expert_color, g.expert_rank}).second);
    EXPECT_TRUE(shard_slots.insert({g.expert_shard_color, g.expert_shard_rank}).second);
  }
  // hybrid over 2 nodes of 4, experts split over 2 inside each node: every shard group has two
  // expert groups; the replicas (across nodes) hold the same experts at the same place.
  const auto h = comm::with_experts(group_layout(Sharding::kHybridShard, topo(6, 8, 4), 0), 2);
  EXPECT_EQ(h.expert_color, 3);
  EXPECT_EQ(h.expert_rank, 0);
  EXPECT_EQ(h.expert_shard_size, 2);
  EXPECT_EQ(h.expert_shard_color, 2);  // node 1, place 0
  EXPECT_EQ(h.expert_shard_rank, 1);
  EXPECT_EQ(comm::with_experts(h, 1).expert_size, 2) << "1: the layout as it is";
  for (const auto& [s, n] : std::vector<std::pair<Sharding, int>>{
           {Sharding::kFullShard, 3}, {Sharding::kNoShard, 2}, {Sharding::kHybridShard, 8}}) {
    try {
      comm::with_experts(group_layout(s, topo(0, 8, 4), 0), n);
      ADD_FAILURE() << n << " was accepted";
    } catch (const runtime::UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("--expert-parallel"), std::string::npos) << e.what();
    }
  }
}

TEST(FlatLayout, PaddedToTheShardGroupAndTiledBySegments) {
  auto specs = model::llama_param_specs(model::model_preset("tiny"));
  for (int S : {1, 2, 3, 4, 7}) {
    for (int64_t unit = 0; unit < 4; ++unit) {
      auto l = fsdp::flat_layout(specs, unit, S);
      EXPECT_EQ(l.padded % S, 0);
      EXPECT_LT(l.padded - l.numel, S);
      std::vector<int64_t> covered(l.numel, 0);
      for (int r = 0; r < S; ++r)
        for (const auto& s : fsdp::shard_segments(l, r)) {
          EXPECT_EQ(l.entries[s.entry].offset + s.param_offset, r * l.shard_numel + s.shard_offset);
          for (int64_t i = 0; i < s.numel; ++i)
            covered[l.entries[s.entry].offset + s.param_offset + i]++;
        }
      for (int64_t c : covered) ASSERT_EQ(c, 1) << "every element in exactly one shard";
    }
  }
  auto layer = fsdp::flat_layout(specs, 1, 1);
  EXPECT_EQ(layer.entries.size(), 9u);  // q k v o gate up down and two norms
  EXPECT_EQ(fsdp::flat_layout(specs, 3, 1).entries.size(), 2u);  // norm + lm_head
}

// A unit lays its weights first, in model order, then its biases: the fused path's merged
// matmuls need q k v's weights (and Qwen2's q k v biases) side by side.
TEST(FlatLayout, BiasesComeAfterTheUnitsWeights) {
  model::ModelConfig m = model::model_preset("tiny");
  m.model_type = "qwen2";
  const auto layer = fsdp::flat_layout(model::llama_param_specs(m), 1, 1);
  std::vector<std::string> names;
  for (const auto& e : layer.entries) names.push_back(e.name.substr(e.name.find("layers.0.") + 9));
  const std::vector<std::string> want = {
      "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
      "self_attn.o_proj.weight", "mlp.gate_proj.weight",    "mlp.up_proj.weight",
      "mlp.down_proj.weight",    "input_layernorm.weight",  "post_attention_layernorm.weight",
      "self_attn.q_proj.bias",   "self_attn.k_proj.bias",   "self_attn.v_proj.bias"};
  EXPECT_EQ(names, want);
  int64_t offset = 0;
  for (const auto& e : layer.entries) {
    EXPECT_EQ(e.offset, offset) << e.name;
    offset += e.numel;
  }
}

// The tiny preset: vocabulary 512, hidden 64, intermediate 176, 2 layers, 4 heads of 16, 2 kv
// heads (kv width 32). Its units, by hand:
//   embedding  512 x 64                                             = 32768
//   layer      q 64x64 4096 + k 32x64 2048 + v 2048 + o 4096
//              + gate, up, down 3 x 176x64 = 33792 + 2 norms x 64  = 46208
//   head       norm 64 + lm_head 512 x 64                           = 32832
//   total      32768 + 2 x 46208 + 32832                            = 158016
// Padded to the shard group S and split in S:
//   S = 2: every unit is even: padded = numel; shards 16384, 23104, 23104, 16416 (sum 79008)
//   S = 3: 32768 = 3 x 10922 + 2 -> 32769 (shard 10923); 46208 = 3 x 15402 + 2 -> 46209 (15403);
//          32832 = 3 x 10944 -> 32832 (10944); shards sum 52673, 3 padding elements
//   S = 7: 32768 = 7 x 4681 + 1 -> 32774 (4682); 46208 = 7 x 6601 + 1 -> 46214 (6602);
//          32832 = 7 x 4690 + 2 -> 32837 (4691); shards sum 22577, 6 + 6 + 6 + 5 = 23 padding
TEST(FlatLayout, TinyUnitSizesWorkedOutByHand) {
  const model::ModelConfig m = model::model_preset("tiny");
  const auto specs = model::llama_param_specs(m);
  const std::vector<int64_t> numel = {32768, 46208, 46208, 32832};
  const std::map<int, std::vector<int64_t>> padded = {{1, {32768, 46208, 46208, 32832}},
                                                      {2, {32768, 46208, 46208, 32832}},
                                                      {3, {32769, 46209, 46209, 32832}},
                                                      {7, {32774, 46214, 46214, 32837}}};
  const std::map<int, std::vector<int64_t>> shard = {{1, {32768, 46208, 46208, 32832}},
                                                     {2, {16384, 23104, 23104, 16416}},
                                                     {3, {10923, 15403, 15403, 10944}},
                                                     {7, {4682, 6602, 6602, 4691}}};
  for (const auto& [S, want_padded] : padded) {
    const auto units = unit_sizes(m, specs, S);
    ASSERT_EQ(units.size(), 4u);
    for (size_t u = 0; u < units.size(); ++u) {
      EXPECT_EQ(units[u].numel, numel[u]) << "unit " << u;
      EXPECT_EQ(units[u].padded, want_padded[u]) << "unit " << u << " S " << S;
      EXPECT_EQ(units[u].shard_numel, shard.at(S)[u]) << "unit " << u << " S " << S;
    }
  }
  // The tensors ATen allocates for these specs hold the same 158016 elements.
  EXPECT_EQ(model::ParamStore::initialize(m, 1).numel(), 158016);
}

TEST(MemoryModel, TinyMemoryReportWorkedOutByHand) {
  const model::ModelConfig m = model::model_preset("tiny");
  const auto specs = model::llama_param_specs(m);
  // S = 2: 79008 shard elements (above): fp32 master 4 x 79008 = 316032, the fp32 gradient
  // shard the same, AdamW's two moments 8 x 79008 = 632064; no padding. No-sync buffers: the
  // padded units in fp32, 4 x 158016 = 632064. One unsharded replica: 16 x 158016 = 2528256.
  const MemoryReport two = persistent_bytes(TrainingSizes{unit_sizes(m, specs, 2), {}}, true, 4);
  EXPECT_EQ(two.param_bytes, 316032);
  EXPECT_EQ(two.grad_bytes, 316032);
  EXPECT_EQ(two.optimizer_bytes, 632064);
  EXPECT_EQ(two.padding_elements, 0);
  EXPECT_EQ(two.no_sync_bytes, 632064);
  EXPECT_EQ(two.unsharded_bytes, 2528256);
  EXPECT_EQ(persistent_bytes(TrainingSizes{unit_sizes(m, specs, 2), {}}, false, 4).no_sync_bytes,
            0);
  // S = 3: 52673 shard elements: 4 x 52673 = 210692, 8 x 52673 = 421384; 3 padding elements;
  // no-sync 4 x (32769 + 46209 + 46209 + 32832) = 4 x 158019 = 632076.
  const MemoryReport three = persistent_bytes(TrainingSizes{unit_sizes(m, specs, 3), {}}, true, 4);
  EXPECT_EQ(three.param_bytes, 210692);
  EXPECT_EQ(three.grad_bytes, 210692);
  EXPECT_EQ(three.optimizer_bytes, 421384);
  EXPECT_EQ(three.padding_elements, 3);
  EXPECT_EQ(three.no_sync_bytes, 632076);
  EXPECT_EQ(three.unsharded_bytes, 2528256);
  // S = 7: 22577 shard elements: 4 x 22577 = 90308; 23 padding elements.
  const MemoryReport seven = persistent_bytes(TrainingSizes{unit_sizes(m, specs, 7), {}}, false, 4);
  EXPECT_EQ(seven.param_bytes, 90308);
  EXPECT_EQ(seven.optimizer_bytes, 180616);
  EXPECT_EQ(seven.padding_elements, 23);
}

TEST(MemoryModel, Llama2SevenBMatchesItsPublishedParameterCount) {
  // Llama-2-7b: 6,738,415,616 parameters (transformers' num_parameters() of
  // meta-llama/Llama-2-7b-hf). By hand: a layer 4 x 4096^2 + 3 x 4096 x 11008 + 2 x 4096 =
  // 202383360 (8 x 25297920), the embedding and lm_head 32000 x 4096 = 131072000 (8 x 16384000),
  // the final norm 4096: the head unit 131076096 = 8 x 16384512. Every unit divides by 8, so the
  // 8-way shards have no padding and the sharded state is exactly 16 bytes x 6738415616 / 8 =
  // 13476831232.
  const model::ModelConfig m = model::model_preset("llama2-7b");
  const auto units = unit_sizes(m, model::llama_param_specs(m), 8);
  ASSERT_EQ(units.size(), 34u);
  int64_t numel = 0;
  for (const auto& u : units) numel += u.numel;
  EXPECT_EQ(numel, 6738415616);
  EXPECT_EQ(units[0].shard_numel, 16384000);
  EXPECT_EQ(units[1].shard_numel, 25297920);
  EXPECT_EQ(units[33].shard_numel, 16384512);
  const MemoryReport p = persistent_bytes(TrainingSizes{units, {}}, false, 2);
  EXPECT_EQ(p.padding_elements, 0);
  EXPECT_EQ(p.param_bytes + p.grad_bytes + p.optimizer_bytes, 13476831232);
  EXPECT_EQ(p.unsharded_bytes, 16 * 6738415616);
}

TEST(MemoryModel, GatheredUnitsFollowTheStrategyAndTheInflightLimit) {
  const model::ModelConfig m = model::model_preset("tiny");
  const auto units = unit_sizes(m, model::llama_param_specs(m), 4);
  const model::ActivationBytes act = model::activation_bytes_per_token(m, 4);
  StepShape shape{2, 64, 1, 4, 4, 4};
  shape.head_chunk = model::RunPlan{}.head_chunk(m, 2 * 64);  // the default plan's head
  auto peak_units = [&](Sharding s, int inflight) {
    ShardingConfig c;
    c.sharding = s;
    c.max_inflight_gathers = inflight;
    return step_peak(TrainingSizes{units, {}}, c, shape, act, 0).gathered_units;
  };
  EXPECT_EQ(peak_units(Sharding::kFullShard, 2), 2);  // the unit computing and the one prefetched
  EXPECT_EQ(peak_units(Sharding::kFullShard, 3), 3);
  EXPECT_EQ(peak_units(Sharding::kShardGradOp, 2),
            static_cast<int>(units.size()));  // kept from forward to backward
  ShardingConfig c;
  c.activation_checkpointing.mode = Recompute::kFull;
  const auto with_ac = step_peak(TrainingSizes{units, {}}, c, shape, act, 0);
  c.activation_checkpointing.mode = Recompute::kNone;
  const auto without = step_peak(TrainingSizes{units, {}}, c, shape, act, 0);
  EXPECT_LT(with_ac.activations, without.activations);
  EXPECT_EQ(with_ac.engine_bytes,
            without.engine_bytes);  // the engine's own bytes do not include activations
}

// Per layer, what each checkpointing setting keeps and holds in backward (--ac-every 2: layers
// 0, 2, ... only), and the step's activations ordered none > selective > full, with every other
// layer in between.
TEST(MemoryModel, CheckpointingSettingsKeepWhatTheirLayersKeep) {
  model::ModelConfig m = model::model_preset("tiny");
  m.num_layers = 4;
  const model::ActivationBytes act = model::activation_bytes_per_token(m, 4);
  EXPECT_LT(act.layer_input, act.layer_selective);
  EXPECT_LT(act.layer_selective, act.layer);
  const ActivationCheckpointing selective_2 = parse_activation_checkpointing("selective", 2);
  EXPECT_EQ(layer_kept(selective_2, act, 0), act.layer_selective);
  EXPECT_EQ(layer_kept(selective_2, act, 1), act.layer);
  EXPECT_EQ(layer_working(selective_2, act, 2), act.layer_backward + act.selective_recompute);
  EXPECT_EQ(layer_working(selective_2, act, 3), act.layer_backward);
  const ActivationCheckpointing full_1 = parse_activation_checkpointing("full", 1);
  EXPECT_EQ(layer_kept(full_1, act, 3), act.layer_input);
  EXPECT_EQ(layer_working(full_1, act, 3), act.layer_backward + act.layer - act.layer_input);
  EXPECT_EQ(layer_kept(parse_activation_checkpointing("none", 1), act, 0), act.layer);

  const auto units = unit_sizes(m, model::llama_param_specs(m), 1);
  StepShape shape{2, 64, 1, 4, 4, 1};
  shape.head_chunk = model::RunPlan{}.head_chunk(m, 2 * 64);  // the default plan's head
  const auto activations = [&](const std::string& mode, int64_t every) {
    ShardingConfig c;
    c.activation_checkpointing = parse_activation_checkpointing(mode, every);
    return step_peak(TrainingSizes{units, {}}, c, shape, act, 0).activations;
  };
  const int64_t none = activations("none", 1), selective = activations("selective", 1),
                full = activations("full", 1);
  EXPECT_GT(none, selective);
  EXPECT_GT(selective, full);
  EXPECT_GT(none, activations("selective", 2));
  EXPECT_GT(activations("selective", 2), selective);
  EXPECT_GT(activations("full", 2), full);
  EXPECT_LT(activations("full", 2), none);
}

namespace {
// Bytes of CPU tensors held now, by the counting allocator (installed before anything below is
// made).
int64_t held() { return runtime::host_tensor_bytes(); }
}  // namespace

// What autograd keeps, measured: the counting allocator around a real fp32 decoder layer's
// forward, and around the loss's forward and backward, against the per-token figures.
TEST(MemoryModel, ActivationBytesPerTokenMatchTheCountingAllocator) {
  runtime::track_host_tensor_memory();
  const model::ModelConfig m = model::model_preset("tiny");
  const model::ActivationBytes a = model::activation_bytes_per_token(m, 4);
  const int64_t T = 128;
  at::manual_seed(0);
  const model::ParamStore params = model::ParamStore::initialize(m, 1);
  const model::WeightLookup lookup = [&params](const std::string& name) {
    return params.get(name);
  };
  const model::LayerWeights w = model::LayerWeights::bind(m, lookup, 0);
  model::Rotary rope(m, T);
  const at::Tensor x = at::randn({1, T, m.hidden_size}).set_requires_grad(true);
  // The layer's input x is made before the count starts; its output, which the next layer
  // keeps as its input, is counted instead: the same size.
  const int64_t before_layer = held();
  at::Tensor y =
      model::decoder_layer(m, w, x, model::token_layout(rope, {}, T, at::kCPU, at::kFloat));
  const int64_t layer_measured = held() - before_layer;
  std::cout << "decoder layer: " << layer_measured << " bytes held after forward, "
            << layer_measured / T << " per token; model " << a.layer << "\n";
  EXPECT_GT(layer_measured, 0);
  EXPECT_NEAR(static_cast<double>(layer_measured) / T, static_cast<double>(a.layer),
              0.02 * a.layer);
  y = at::Tensor();
  EXPECT_EQ(held(), before_layer) << "dropping the output frees what the forward kept";

  // The loss over T tokens (T + 1 positions): forward keeps the fp32 log-softmax; backward holds
  // two logit-sized gradients beside it.
  const at::Tensor logits = at::randn({1, T + 1, m.vocab_size}).set_requires_grad(true);
  const at::Tensor labels = at::randint(m.vocab_size, {1, T + 1}, at::kLong);
  const int64_t before_loss = held();
  model::LossSum loss = model::causal_lm_loss(logits, labels);
  const int64_t loss_fwd = held() - before_loss;
  runtime::reset_host_tensor_peak();
  loss.sum.backward();
  const int64_t loss_peak = runtime::host_tensor_peak_bytes() - before_loss;
  std::cout << "loss: forward keeps " << loss_fwd / T << " bytes per token, backward peak "
            << loss_peak / T << "; model " << a.logits_loss << "\n";
  EXPECT_NEAR(static_cast<double>(loss_fwd) / T, 4.0 * m.vocab_size, 0.02 * 4 * m.vocab_size);
  EXPECT_NEAR(static_cast<double>(loss_peak) / T, static_cast<double>(a.logits_loss),
              0.1 * a.logits_loss);
  EXPECT_GT(model::activation_bytes_per_token(m, 2).layer,
            a.layer / 2);  // bf16 keeps fp32 norm copies
}

// Packed rows on a CPU: the document mask and gathered cos/sin that the step holds, and what a
// layer keeps on the masked path (the mask in the compute dtype, K and V repeated per query head).
TEST(MemoryModel, PackedRowsBytesMatchTheCountingAllocator) {
  runtime::track_host_tensor_memory();
  const model::ModelConfig m =
      model::model_preset("tiny");  // 4 query heads over 2 kv heads: K and V repeat
  const int64_t B = 2, T = 128;
  const model::PackedRows packed{T, /*varlen=*/false};
  const model::ActivationBytes a = model::activation_bytes_per_token(m, 4, nullptr, &packed);
  const model::ActivationBytes padded = model::activation_bytes_per_token(m, 4);
  at::manual_seed(0);
  const model::ParamStore params = model::ParamStore::initialize(m, 1);
  const model::WeightLookup lookup = [&params](const std::string& name) {
    return params.get(name);
  };
  const model::LayerWeights w = model::LayerWeights::bind(m, lookup, 0);
  model::Rotary rope(m, T);
  // Two documents per row: positions restart at 50 and at 90.
  const at::Tensor positions =
      at::cat({at::arange(50), at::arange(40), at::arange(38)}).to(at::kLong).repeat({B, 1});
  const at::Tensor x = at::randn({B, T, m.hidden_size}).set_requires_grad(true);
  const int64_t before_layout = held();
  const model::TokenLayout layout = model::token_layout(rope, positions, T, at::kCPU, at::kFloat);
  ASSERT_TRUE(layout.same_doc.defined());
  const int64_t layout_measured = held() - before_layout;
  const int64_t positions_held =
      2 * 8 * B * T;  // this batch's and the prefetched one's: made by the loader
  std::cout << "packed layout: " << layout_measured << " bytes; model "
            << a.step_held * B * T - positions_held << "\n";
  EXPECT_EQ(layout_measured, a.step_held * B * T - positions_held);
  const int64_t before_layer = held();
  at::Tensor y = model::decoder_layer(m, w, x, layout);
  const int64_t layer_measured = held() - before_layer;
  std::cout << "packed decoder layer: " << layer_measured / (B * T) << " bytes per token; model "
            << a.layer << " (one document per row: " << padded.layer << ")\n";
  EXPECT_GT(a.layer, padded.layer);
  EXPECT_NEAR(static_cast<double>(layer_measured) / (B * T), static_cast<double>(a.layer),
              0.02 * a.layer);
  // CUDA's varlen kernel keeps what one document per row keeps.
  const model::PackedRows varlen{T, /*varlen=*/true};
  EXPECT_EQ(model::activation_bytes_per_token(m, 2, nullptr, &varlen).layer,
            model::activation_bytes_per_token(m, 2).layer);
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
  a.alloc(500);  // forward: activations
  EXPECT_EQ(t.close_phase().allocated, 1500);
  a.alloc(300);  // backward: gradients while activations are freed
  a.free(500);
  EXPECT_EQ(t.close_phase().allocated, 1800);
  a.free(300);  // optimizer: only the state
  EXPECT_EQ(t.close_phase().allocated,
            1300);  // the gradients, held at the reset; less than the step's peak
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

// --cpu-offload's host thread binds the engine's device before its first job, on itself: a GPU
// rank's thread would otherwise make its first CUDA call on GPU 0 (another context there).
TEST(HostOffload, TheThreadStartsOnTheEnginesDeviceBeforeAnyJob) {
  std::vector<std::string> order;  // the worker alone appends, and settle() orders the reads
  std::thread::id started_on, job_on;
  at::Device bound = at::kMeta;
  {
    HostOffload host(at::kCPU, {nullptr}, [&](at::Device d) {
      bound = d;
      started_on = std::this_thread::get_id();
      order.push_back("start");
    });
    host.run(
        0,
        [&] {
          job_on = std::this_thread::get_id();
          order.push_back("job");
        },
        /*refresh=*/false);
    host.settle();
  }
  EXPECT_EQ(order, (std::vector<std::string>{"start", "job"}));
  EXPECT_EQ(bound, at::Device(at::kCPU));
  EXPECT_EQ(started_on, job_on);
  EXPECT_NE(started_on, std::this_thread::get_id());
}
