// LoRA (Hu et al.), as Hugging Face PEFT computes it: a target projection W gets two small
// trainable matrices A [r, in] and B [out, r], and computes x W^T + dropout(x) A^T B^T * alpha/r.
// Pure functions and the adapters' names and shapes; the FSDP engine owns sharding and training.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "shardtrain/model/config.h"
#include "shardtrain/model/params.h"
#include "shardtrain/model/projections.h"

namespace shardtrain::model {

struct LoraConfig {
  int64_t rank = 0;       // --lora-rank; 0: LoRA off (full fine-tuning)
  double alpha = 32;      // --lora-alpha; llama-recipes' default
  double dropout = 0.05;  // --lora-dropout; llama-recipes' default
  std::vector<std::string> targets{
      "q_proj", "v_proj"};  // --lora-targets (proj_name()s); llama-recipes' default
  bool enabled() const { return rank > 0; }
  double scale() const { return alpha / static_cast<double>(rank); }  // PEFT's scaling
  bool targets_proj(Proj p) const;
  void validate() const;  // throws UsageError naming the option
};
// "q_proj,v_proj" -> targets; throws UsageError naming --lora-targets for an unknown or repeated
// one.
std::vector<std::string> parse_lora_targets(const std::string& csv);
std::string join_lora_targets(const std::vector<std::string>& targets);

// The adapters by Hugging Face module name, e.g. model.layers.3.self_attn.q_proj.lora_A.weight
// ([r, in]) and ...lora_B.weight ([out, r]), layer by layer in kProjections order, A before B.
// unit: the layer's FSDP unit (layer + 1), as for the base parameters. is_norm is false.
std::vector<ParamSpec> lora_param_specs(const ModelConfig& cfg, const LoraConfig& lora);
std::string lora_name(int64_t layer, Proj p, char ab);  // ab: 'A' or 'B'
// PEFT's file names: "base_model.model." + name (adapter_model.safetensors keys).
std::string peft_key(const std::string& name);

// PEFT's init: A ~ kaiming_uniform(a=sqrt(5)), i.e. U(-1/sqrt(in), 1/sqrt(in)), seeded per
// name (identical at any world size); B = 0, so a fresh adapter leaves the model unchanged.
at::Tensor init_lora_param(const ParamSpec& spec, uint64_t seed);

// Inverted dropout with a mask drawn on x's device by a generator of that device seeded with
// `seed` alone, so activation checkpointing's recompute draws the same mask. The same seed gives
// the same mask on one device type; CPU and CUDA masks differ. p == 0 returns x.
at::Tensor lora_dropout(const at::Tensor& x, double p, uint64_t seed);
// The same per row: x [B, ...] row b gets the mask lora_dropout draws for row_seeds[b] (B seeds),
// so a row's mask is the same whichever rank or micro-batch holds it. A context-parallel share
// (tokens defined): x [B, L, ...] holds tokens [L] of rows of row_tokens tokens; each gets the
// mask its place in the whole row gets (places past the row: the row's last token's).
struct DropoutTokens {
  at::Tensor index;        // [L] int64 on x's device; undefined: x holds whole rows
  int64_t row_tokens = 0;  // tokens in a whole row
};
at::Tensor lora_dropout_rows(const at::Tensor& x, double p, const std::vector<uint64_t>& row_seeds,
                             const DropoutTokens& tokens = {});
// Each row's dropout seed from (seed, epoch, sample id): the sample's place in the data, never
// the rank, the micro-batch or a pass count, so every layout and a resume draw the same masks.
std::vector<uint64_t> dropout_row_seeds(uint64_t seed, int64_t epoch,
                                        const std::vector<int64_t>& sample_ids);
// One seed per row for a module: the rows' seeds mixed with the layer and the projection.
std::vector<uint64_t> module_seeds(const std::vector<uint64_t>& row_seeds, int64_t layer,
                                   int projection);
// One projection's adapter, bound for one forward: the part a targeted projection has.
struct LoraAdapter {
  at::Tensor a;        // [r, in]
  at::Tensor b;        // [out, r]
  double scale = 1;    // alpha / r
  double dropout = 0;  // 0 outside training
  std::vector<uint64_t>
      row_seeds;         // [B] one mask per module and row (module_seeds); as PEFT, one per module
  DropoutTokens tokens;  // a context-parallel share's places in its rows
};
// x W^T + bias + (xd A^T) B^T * scale, where xd is x after dropout (PEFT's lora.Linear.forward:
// the base layer, bias included, then the adapter). bias: [out], or undefined for none.
at::Tensor lora_linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& a,
                       const at::Tensor& b, double scale, const at::Tensor& xd,
                       const at::Tensor& bias = {});
at::Tensor lora_linear(const at::Tensor& x, const at::Tensor& w, const LoraAdapter& adapter,
                       const at::Tensor& bias = {});
// The adapter's term alone, (xd A^T) B^T * scale: added to a base computed elsewhere (--fp8).
at::Tensor lora_update(const at::Tensor& x, const LoraAdapter& adapter);
// W + scale * B A: the merged weight (PEFT's merge_and_unload), in W's dtype.
at::Tensor merge_lora(const at::Tensor& w, const at::Tensor& a, const at::Tensor& b, double scale);

}  // namespace shardtrain::model
