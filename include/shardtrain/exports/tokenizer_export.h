// The tokenizer files every export carries, so that AutoTokenizer.from_pretrained(export) and
// pipeline("text-generation", model=export) work on what train and convert write.
#pragma once
#include <string>

#include <vector>

#include "shardtrain/model/config.h"
#include "shardtrain/runtime/mpi_env.h"

namespace shardtrain::exports {

// Where an export's tokenizer comes from: the --weights directory's own tokenizer files when it has
// them, else --tokenizer (a .model, a tokenizer.json or a directory). data: the token file whose
// recorded tokenizer_sha256 the exported tokenizer file must match ("" or unreadable: not checked).
struct TokenizerSource {
  std::string weights, tokenizer, data;
};

// Throws UsageError when the tokenizer the export would carry is not the one the token file was
// prepared with (naming both), or a --tokenizer is no tokenizer that fits the vocabulary: train
// checks before its first step, convert before it loads.
void check_export_tokenizer(const TokenizerSource& src, const model::ModelConfig& model);
// Throws UsageError when the --weights directory has tokenizer files and the --tokenizer that
// encodes prompts (generate, the exact-match task) is none of them (same sha256).
void check_prompt_tokenizer(const std::string& weights, const std::string& tokenizer);
// Rank 0, into an export directory: the tokenizer files (copied unchanged from --weights; or
// --tokenizer's tokenizer.json or tokenizer.model with the tokenizer_config.json,
// special_tokens_map.json and chat template beside it, a bare tokenizer.model getting those of a
// Llama-2 LlamaTokenizer) and, for a full model, generation_config.json. With no source the export
// stands and one warning line says how to add one.
void write_tokenizer_files(const std::string& dir, const TokenizerSource& src,
                           const model::ModelConfig& model, bool full_model);

// Collective, before any compute: every token file in `data` ("" entries skipped) was prepared
// with the model's tokenizer (src's --weights files, else its --tokenizer, as
// check_export_tokenizer takes them), and the tokenizer that encodes prompts (prompt_tokenizer;
// "" when none) is the --weights directory's.
void check_tokenizers(const TokenizerSource& src, const std::vector<std::string>& data,
                      const std::string& prompt_tokenizer, const model::ModelConfig& model,
                      const runtime::MpiEnv& env);

}  // namespace shardtrain::exports
