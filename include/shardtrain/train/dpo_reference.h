// DPO's reference model, the starting weights frozen: an adapter run's base with the adapters
// switched off (no second copy), a frozen sharded copy of the starting weights, or the
// log-probabilities 'eval --save-logps' wrote (no reference model in memory); and the file those
// log-probabilities live in.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "shardtrain/data/token_file.h"
#include "shardtrain/fsdp/engine.h"
#include "shardtrain/train/dpo_objective.h"

namespace shardtrain::train {

// Where DPO's reference comes from: the run's starting weights (the seed of a random start,
// --weights, the starting adapters) unless --reference-logps / --val-reference-logps name files.
struct ReferenceSources {
  std::string weights, adapter_init;
  uint64_t seed = 0;
  std::string reference_logps, val_reference_logps;
};

struct Reference {
  std::unique_ptr<fsdp::FsdpEngine> frozen;  // the frozen copy, when one runs
  ReferenceFn train, val;                    // --data's rows, --val-data's
  std::string what;                          // for the log: which reference this is
};

// What the reference is, from the sources alone (the checkpoint records it before any step). A
// resume against another is refused: its rewards would be another objective's.
std::string reference_identity(const ReferenceSources& s);

// Collective. engine: the policy, built from weights and adapter (either may be null); val may be
// null.
Reference make_reference(const ReferenceSources& s, fsdp::FsdpEngine& engine,
                         comm::ParallelDims& groups, const io::SafetensorsModel* weights,
                         const io::SafetensorsModel* adapter, const data::TokenFile& train,
                         const data::TokenFile* val);
// eval --objective dpo's reference for data: reference_logps (--reference-logps), or an adapter
// engine's base with the adapter switched off; what: for the output.
ReferenceFn eval_reference(const std::string& reference_logps, fsdp::FsdpEngine& engine,
                           comm::ParallelDims& dims, const data::TokenFile& data,
                           std::string* what);

// The objective and the token files (option, file; null: not given) agree: a preference file goes
// with DPO, any other with SFT. pairs_without_dpo: what to do instead when a preference file
// comes without --objective dpo (null: that is allowed). Throws AgreedUsageError.
void check_objective_data(bool dpo,
                          const std::vector<std::pair<const char*, const data::TokenFile*>>& files,
                          const char* pairs_without_dpo);

// eval --save-logps: each row's summed answer log-probability of data, [rows] fp64 in /logps,
// with data's token_file_identity; collective, rank 0 writes.
void save_logps(const std::string& path, fsdp::FsdpEngine& engine, const comm::ParallelDims& dims,
                const data::TokenFile& data, int64_t batch_size, int rank);
// Reads a save_logps file for data; throws UsageError naming opt when it was written for another
// token file.
at::Tensor read_logps(const std::string& opt, const std::string& path, const data::TokenFile& data);

}  // namespace shardtrain::train
