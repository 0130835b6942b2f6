// DPO's reference model, the starting weights frozen: a LoRA run's base with the adapters
// switched off (no second copy), a frozen sharded copy of the starting weights, or the
// log-probabilities 'eval --save-logps' wrote (no reference model in memory).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "shardtrain/cli/engine_setup.h"
#include "shardtrain/cli/options.h"
#include "shardtrain/data/token_file.h"
#include "shardtrain/fsdp/engine.h"
#include "shardtrain/train/dpo_objective.h"

namespace shardtrain::cli {

struct Reference {
  std::unique_ptr<fsdp::FsdpEngine> frozen;   // the frozen copy, when one runs
  shardtrain::train::ReferenceFn train, val;  // --data's rows, --val-data's
  std::string what;                           // for the log: which reference this is
};

// What DPO's reference is, from the options alone (the checkpoint records it before any step):
// --reference-logps's file, or the starting weights (--weights, --lora-init's adapters, or the
// seed of a random start). A resume against another is refused: its rewards would be another
// objective's.
std::string reference_identity(const TrainOptions& o);

// Collective. val may be null.
Reference make_reference(const TrainOptions& o, EngineSetup& setup, const data::TokenFile& train,
                         const data::TokenFile* val);
// eval --objective dpo's reference for data: --reference-logps, or with --lora the base with the
// adapter switched off; what: for the output.
shardtrain::train::ReferenceFn eval_reference(const EvalOptions& o, fsdp::FsdpEngine& engine,
                                              const data::TokenFile& data, std::string* what);

// --objective and the token files (option, file; null: not given) agree: a preference file goes
// with --objective dpo, any other with sft. pairs_without_dpo: what to do instead when a
// preference file comes without --objective dpo (null: that is allowed). Throws
// AgreedUsageError.
void check_objective(const PreferenceOptions& p,
                     const std::vector<std::pair<const char*, const data::TokenFile*>>& files,
                     const char* pairs_without_dpo);

// eval --save-logps: each row's summed answer log-probability of data, [rows] fp64 in /logps,
// with data's token_file_identity; collective, rank 0 writes.
void save_logps(const std::string& path, fsdp::FsdpEngine& engine, const data::TokenFile& data,
                int64_t batch_size, int rank);
// Reads a save_logps file for data; throws UsageError naming opt when it was written for another
// token file.
at::Tensor read_logps(const std::string& opt, const std::string& path, const data::TokenFile& data);

}  // namespace shardtrain::cli
