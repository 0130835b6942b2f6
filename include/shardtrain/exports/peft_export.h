// A low-rank adapter run's outputs: the adapter in PEFT's format, and the merge into full weights.
#pragma once
#include <ATen/core/Tensor.h>

#include <map>
#include <string>

#include "shardtrain/exports/tokenizer_export.h"
#include "shardtrain/fsdp/engine.h"

namespace shardtrain::exports {

// Collective: the engine's adapters as PEFT saves them: adapter_model.safetensors (fp32) and
// adapter_config.json, which peft.PeftModel.from_pretrained loads, with the tokenizer files.
// base: recorded as the base path.
void export_peft(const std::string& dir, fsdp::FsdpEngine& engine, const std::string& base,
                 int rank, const TokenizerSource& tokenizer);
// full[W] = W + alpha/r B A for every targeted projection (pure; fp32 host tensors by name).
void merge_adapters(std::map<std::string, at::Tensor>& full,
                    const std::map<std::string, at::Tensor>& adapters,
                    const model::ModelConfig& model, const model::LoraConfig& lora);

}  // namespace shardtrain::exports
