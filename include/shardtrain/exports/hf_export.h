// Checkpoints to Hugging Face: full safetensors (adapters merged, as PEFT's merge_and_unload) and
// what a checkpoint recorded of its model, adapters and tokenizer.
#pragma once
#include <ATen/core/ScalarType.h>

#include <string>

#include "shardtrain/exports/tokenizer_export.h"
#include "shardtrain/fsdp/engine.h"

namespace shardtrain::exports {

// Collective: every rank gathers the full parameters; rank 0 writes Hugging Face safetensors
// (5 GiB shards), config.json with torch_dtype and the tokenizer files into dir. An engine's
// adapters are merged into the weights (W + alpha/r B A), as PEFT's merge_and_unload.
void export_hf(const std::string& dir, const model::ModelConfig& model, fsdp::FsdpEngine& engine,
               at::ScalarType dtype, int rank, const TokenizerSource& tokenizer);

// A checkpoint's model, from the config it records.
model::ModelConfig checkpoint_model(const std::string& path);
// A checkpoint's export tokenizer: `tokenizer` and `base` when given, else what its run recorded
// (--weights, or for a converted checkpoint the model directory it came from; an existing
// --tokenizer) and its --data.
TokenizerSource checkpoint_tokenizer(const std::string& path, const std::string& tokenizer,
                                     const std::string& base);

}  // namespace shardtrain::exports
