// The decoder's forward pass (every family of model/family.h), written once, unit by unit. Each
// unit reads its weights by Hugging Face name through a lookup, so the FSDP engine hands over
// all-gathered views just in time and single-rank code hands over its own tensors; both run these
// same functions.
#pragma once
#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "shardtrain/model/config.h"
#include "shardtrain/model/fp8.h"
#include "shardtrain/model/lora.h"
#include "shardtrain/model/norm_activation.h"
#include "shardtrain/model/params.h"
#include "shardtrain/model/projections.h"
#include "shardtrain/model/rotary.h"
#include "shardtrain/model/token_layout.h"

namespace shardtrain::model {

// A LoRA run's adapters for one forward: the lookup reads lora_param_specs' names.
struct LoraRun {
  const LoraConfig* cfg = nullptr;
  WeightLookup adapter;
  std::vector<uint64_t>
      row_seeds;  // [B] dropout: each row's seed, mixed with the layer and target (module_seeds)
  bool train = false;    // dropout only in training
  DropoutTokens tokens;  // context parallelism: the share's places in its rows (dropout masks)
};

// A projection with the parts it has: its weight and, when LoRA targets it, an adapter. Which
// parts it has is decided once, when a layer's weights are bound; the forward only calls it.
struct Projection {
  at::Tensor weight;                   // [out, in]
  at::Tensor bias;                     // [out]; undefined where the model has none (has_bias)
  std::optional<LoraAdapter> adapter;  // LoRA: the targeted projections only
  Fp8Mode fp8 = Fp8Mode::kOff;         // --fp8: the weight's GEMMs in float8 (the adapter's not)
  at::Tensor operator()(const at::Tensor& x) const;  // x [.., in] -> [.., out]
};

struct MoeWeights;
struct ExpertGroup;

struct LayerWeights {
  std::array<Projection, kNumProjections>
      proj;  // by Proj: [H, H], [KV, H], [KV, H], [H, H], [F, H], [F, H], [H, F]
  // By Merged, bound only when merging: q k v [H + 2 KV, H] and gate up [2F, H] as one
  // projection each (undefined weight: computed one by one, e.g. where LoRA targets a member).
  std::array<Projection, 2> merged;
  // By NormRole (params.h): the family's norms; undefined where it has none.
  std::array<at::Tensor, kNumNormRoles> norms;
  // A sparse layer's router and experts (model/moe.h); null for a dense layer.
  std::shared_ptr<const MoeWeights> moe;
  int64_t window = 0;       // attention reaches this far back (0: the whole prefix)
  int64_t layer = 0;        // its index (a KV cache's layer)
  bool local_rope = false;  // Gemma 3's sliding layers: the layout's local RoPE tables
  const Projection& operator[](Proj p) const { return proj[static_cast<int>(p)]; }
  const at::Tensor& norm(NormRole r) const { return norms[static_cast<int>(r)]; }
  const Projection& operator[](Merged m) const { return merged[static_cast<int>(m)]; }
  // By Hugging Face name; lora (nullptr: none) gives each projection it targets its adapter.
  // merge: the lookup also answers merged_weight_name/merged_bias_name (an FSDP unit's views).
  // fp8: every projection's (model/fp8.h). experts: expert parallelism's group (the lookup
  // answers this rank's experts only); nullptr: every expert.
  static LayerWeights bind(const ModelConfig& cfg, const WeightLookup& w, int64_t layer,
                           const LoraRun* lora = nullptr, bool merge = false,
                           Fp8Mode fp8 = Fp8Mode::kOff, const ExpertGroup* experts = nullptr);
};

// How a decoder layer runs. selective: the norms and the MLP's activation keep only their inputs
// and run again in backward (selective activation checkpointing, model/checkpointed.h); the
// values and gradients are the same. fused: RMSNorm through LibTorch's fused kernel, q k v and
// gate up each one matmul (when the weights are bound merged), and on CUDA rotary and SwiGLU
// through shardtrain's kernels (model/fused_ops.h), which keep only their inputs as selective
// does; the values differ from the composite path's by bf16 rounding (docs/gpu.md).
// fp8: the seven projections' GEMMs in float8 (model/fp8.h).
struct LayerPath {
  bool selective = false;
  bool fused = false;
  Fp8Mode fp8 = Fp8Mode::kOff;
};

at::Tensor apply_rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);
// x: [B, T, H] -> [B, T, H]; the layout gives the rotary tables and the documents (token_layout.h).
at::Tensor decoder_layer(const ModelConfig& cfg, const LayerWeights& w, const at::Tensor& x,
                         const TokenLayout& layout, LayerPath path = {});

// One unit's forward. Embedding: tokens [B, T] int64 -> hidden [B, T, H] in compute_dtype;
// decoder layer: hidden -> hidden; head: hidden -> logits [B, T, V]. path.fused: the lookup
// answers merged names too (LayerWeights::bind's merge).
at::Tensor unit_forward(const ModelConfig& cfg, const UnitSpec& unit, const WeightLookup& w,
                        const at::Tensor& x, const TokenLayout& layout,
                        at::ScalarType compute_dtype, const LoraRun* lora = nullptr,
                        LayerPath path = {});
// Gemma's final soft-capping (cap * tanh(logits / cap)); the logits as they are for the others.
at::Tensor softcap_logits(const ModelConfig& cfg, const at::Tensor& logits);
// Every unit in order: tokens [B, T] int64 -> logits [B, T, V] in the compute dtype; positions
// [B, T] as Batch::positions (undefined: one document per row); path as unit_forward's.
at::Tensor llama_forward(const ModelConfig& cfg, const WeightLookup& w, const at::Tensor& tokens,
                         const Rotary& rope, at::ScalarType compute_dtype,
                         const LoraRun* lora = nullptr, const at::Tensor& positions = {},
                         LayerPath path = {});

// Sum of token cross-entropies (fp32) over positions whose next-token label is not -100, and
// their count: labels[:, 1:] against logits[:, :-1], Hugging Face's shift.
struct LossSum {
  at::Tensor sum;     // scalar fp32, differentiable
  int64_t count = 0;  // tokens that contributed (0 when not counted)
};
// count = false skips the token count, which would read the labels back from the device.
// aligned: labels[:, t] is logits[:, t]'s target already (Batch::aligned_labels): no shift.
LossSum causal_lm_loss(const at::Tensor& logits, const at::Tensor& labels, bool count = true,
                       bool aligned = false);
int64_t count_loss_tokens(const at::Tensor& labels, bool aligned = false);

}  // namespace shardtrain::model
