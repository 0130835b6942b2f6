// Checks train and eval make before the first step, so that a bad file or an unwritable
// directory ends the run with one line naming it (exit 2), not hours later or as a library's
// stack. Each is collective and every rank throws alike (AgreedUsageError), so none is left
// waiting.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "shardtrain/cli/commands.h"
#include "shardtrain/cli/options.h"
#include "shardtrain/data/token_file.h"
#include "shardtrain/exports/tokenizer_export.h"
#include "shardtrain/runtime/error.h"
#include "shardtrain/runtime/mpi_env.h"

namespace shardtrain::cli {

// Collective: the lowest failing rank's message, or "" when no rank failed. With more than one
// rank the message names the rank and host that saw it.
std::string agreed_failure(const std::string& mine);

// Collective: parse() on every rank; a UsageError on any (a bad option or a missing file, the same
// on every rank that shares the file system, or on some) is the lowest such rank's, thrown on all
// alike as an AgreedUsageError, so that the job ends with one line.
template <class Parse>
auto parse_on_every_rank(Parse parse) -> decltype(parse()) {
  decltype(parse()) parsed;
  std::string failure;
  try {
    parsed = parse();
  } catch (const runtime::AgreedUsageError&) {
    throw;
  } catch (const runtime::UsageError& e) {
    failure = e.what();
  }
  if (const std::string agreed = agreed_failure(failure); !agreed.empty())
    throw runtime::AgreedUsageError(agreed);
  return parsed;
}

// Collective: opens a token file and checks it against the model: its datasets' dtypes and
// shapes, positions, the tokenizer's recorded vocabulary, and every token id in [0, vocab_size),
// scanned once with the rows split over the ranks (the file's max_token_id attribute is not
// trusted); names the row. The same pass counts the loss tokens: none is refused, under 1% of
// the tokens warns (rank 0). The line saying what was checked is logged, or left in *checked.
std::unique_ptr<data::TokenFile> open_token_file(const char* opt, const std::string& path,
                                                 const model::ModelConfig& model,
                                                 const runtime::MpiEnv& env,
                                                 std::string* checked = nullptr);

// Why a file could not be created in dir (or in its nearest existing ancestor, as
// create_directories would), or "" when it can. Creates nothing that outlives the call.
std::string probe_writable_dir(const std::string& dir);
// Why the file at path could not be written (its missing directories made first), as a reason
// to follow "cannot write PATH: " ("Permission denied", "it is a directory; name a file"), or "".
std::string probe_writable_file(const std::string& path);

// --fp8 where it cannot run, before anything else is spent: a projection not in multiples of 16,
// a device without float8 tensor cores (the CPU included), rowwise with fp32 compute. Throws
// AgreedUsageError naming the option.
void check_fp8(const model::ModelConfig& model, const model::RunPlan& run,
               const fsdp::ShardingConfig& cfg, const runtime::MpiEnv& env);

// --context-parallel (and the strategy's groups) where the ranks cannot form them, before
// anything else is spent: one agreed line naming the option (the first rank's reason).
void check_groups(const fsdp::ShardingConfig& cfg, int context_parallel,
                  const runtime::MpiEnv& env);

// Collective: --checkpoint-dir, --save-model and --metrics-file's directory can be written.
void check_writable_outputs(const TrainOptions& o, const runtime::MpiEnv& env);

// Collective, before any compute: every token file in `data` ("" entries skipped) was prepared
// with the model's tokenizer (src's --weights files, else its --tokenizer, as
// check_export_tokenizer takes them), and the tokenizer that encodes prompts (prompt_tokenizer;
// "" when none) is the --weights directory's.
void check_tokenizers(const exports::TokenizerSource& src, const std::vector<std::string>& data,
                      const std::string& prompt_tokenizer, const model::ModelConfig& model,
                      const runtime::MpiEnv& env);

}  // namespace shardtrain::cli
