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

// The settings of a PEFT adapter directory (adapter_config.json beside adapter_model.safetensors)
// for inference (dropout 0); throws UsageError naming opt for anything but a plain LoRA.
model::LoraConfig read_adapter_config(const std::string& dir, const std::string& opt = "--lora");
double adapter_dropout(const std::string& dir);  // its lora_dropout (train --lora-init)

}  // namespace shardtrain::exports
