// What each unit computes, decided on the model side and handed to the sharding layer, which
// calls it without looking inside: the decoder layers' path (fused, fp8), the adapters beside a
// frozen base, the head's loss chunking, and a context-parallel share's token layout. Sharding
// decides where the weights are; the plan decides what is computed with them.
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "shardtrain/model/context_parallel.h"
#include "shardtrain/model/fp8.h"
#include "shardtrain/model/gather_codec.h"
#include "shardtrain/model/llama.h"
#include "shardtrain/model/lora.h"
#include "shardtrain/model/moe.h"
#include "shardtrain/model/trained_params.h"

namespace shardtrain::model {

// One pass's state that the plan's units read, kept by the schedule from forward to the
// recompute.
struct UnitPass {
  bool train = false;               // adapter dropout applies
  bool adapters_off = false;        // the base model alone (a reference pass)
  std::vector<uint64_t> row_seeds;  // [B] adapter dropout's, the same in forward and the recompute
  DropoutTokens dropout_tokens;     // a context-parallel share's places (lay_out sets them)
  TokenLayout layout;               // positions and documents, for forward and the recompute
  // output_router_logits: the load-balancing loss's sums and gradient, which the layout carries
  // to the routers (null: none).
  std::shared_ptr<RouterAux> router_aux;
};

struct RunPlan {
  LoraConfig adapters;  // rank > 0: the base is frozen and only the adapters train
  // Training's head and loss fused (model/lm_loss.h): tokens whose logits live at once; 0: auto
  // (a chunk of logits about the size of the hidden states); -1: unfused (all logits, then the
  // loss).
  int64_t loss_chunk = 0;
  // Decoder layers through the fused path (LayerPath::fused): fused RMSNorm, merged q k v and
  // gate up matmuls, and on CUDA shardtrain's rotary and SwiGLU kernels.
  bool fused_layers = false;
  // The decoder layers' projections multiply in float8 (model/fp8.h; docs/gpu.md).
  Fp8Mode fp8 = Fp8Mode::kOff;
  // Tensorwise fp8: the projections' weights all-gathered in float8 (gather_codec); false: in the
  // compute dtype (--no-fp8-all-gather). Rowwise always gathers in the compute dtype, and so do
  // fused layers with an adapter on a merged projection's member (no one float8 form serves the
  // passes with and without the adapters).
  bool fp8_all_gather = true;
  bool tf32 = true;  // CUDA: TF32 tensor cores for fp32 matmuls (--no-tf32 turns it off)

  void validate() const;  // throws UsageError naming the option
  // What trains under this plan.
  std::unique_ptr<TrainedParams> trained(const ModelConfig& model) const;
  // The units bind q k v's and gate up's adjacent weights as one view each.
  bool merged_projections() const { return fused_layers; }
  // Tokens of the head's logits computed at once in a pass of `tokens`; 0: the head unfused.
  int64_t head_chunk(const ModelConfig& model, int64_t tokens) const;
  // Training passes draw per-row seeds for the adapters' dropout (the rows' sample ids).
  bool draws_row_seeds() const { return adapters.enabled() && adapters.dropout > 0; }
  // The pass's token layout: whole rows at `positions`, or a context-parallel share whose
  // attention runs round `ring`.
  void lay_out(UnitPass& p, const ModelConfig& model, const Rotary& rope, const at::Tensor& tokens,
               const at::Tensor& positions, const ContextShard* share, const ContextRing& ring,
               const at::Device& device, at::ScalarType dtype) const;
  // One unit's forward on the views `base` (and `adapter_weights` where the unit has any: nullptr
  // none); selective: the layer's selective activation checkpointing.
  at::Tensor unit(const ModelConfig& model, const UnitSpec& spec, const WeightLookup& base,
                  const WeightLookup* adapter_weights, const at::Tensor& x, const UnitPass& p,
                  at::ScalarType dtype, bool selective) const;
  // A rank without rows under expert parallelism: unit `spec`'s experts serve the others' tokens
  // (model::serve_experts); an undefined tensor for a unit without experts.
  at::Tensor serve_experts(const ModelConfig& model, const UnitSpec& spec, const WeightLookup& base,
                           const ExpertGroup& group, at::ScalarType dtype,
                           const at::Device& device) const;
  // How unit `spec`'s flat buffer (pieces, padded over shard_size ranks) is all-gathered in
  // `dtype`: nullptr for the compute dtype as it is, or the float8 codec of tensorwise fp8.
  std::unique_ptr<GatherCodec> gather_codec(const ModelConfig& model, const UnitSpec& spec,
                                            std::vector<FlatPiece> pieces, int64_t padded,
                                            int shard_size, int shard_rank,
                                            at::ScalarType dtype) const;
  // Bytes of `numel` gathered elements of `elt` bytes each that a unit of `kind` puts on the wire
  // (the float8 weights one byte each); for the planner.
  double gathered_bytes(const ModelConfig& model, UnitKind kind, int64_t numel, int64_t elt) const;
  // The fused head's final norm (its loss applies lm_head a chunk at a time).
  at::Tensor head_norm(const ModelConfig& model, const at::Tensor& x,
                       const at::Tensor& weight) const;
};

}  // namespace shardtrain::model
