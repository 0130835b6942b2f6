// The checks train and eval make before the first step that need the commands' options; the
// rest live with what they check (runtime/agreement.h, runtime/writable.h, data/token_check.h,
// exports/tokenizer_export.h). Each is collective and every rank throws alike
// (AgreedUsageError), so none is left waiting.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "shardtrain/cli/commands.h"
#include "shardtrain/cli/options.h"
#include "shardtrain/data/token_check.h"
#include "shardtrain/data/token_file.h"
#include "shardtrain/exports/tokenizer_export.h"
#include "shardtrain/runtime/agreement.h"
#include "shardtrain/runtime/error.h"
#include "shardtrain/runtime/mpi_env.h"
#include "shardtrain/runtime/writable.h"
#include "shardtrain/spec/train_spec.h"

namespace shardtrain::cli {

// train's options as the run description plan shares.
spec::TrainSpec train_spec(const TrainOptions& o);
// Collective, before anything else is spent: the combinations spec::validate refuses, and --fp8
// on a device without float8 tensor cores (the CPU included). Throws AgreedUsageError naming the
// option.
void check_run(const TrainOptions& o, const runtime::MpiEnv& env);

// --context-parallel (and the strategy's groups) where the ranks cannot form them, before
// anything else is spent: one agreed line naming the option (the first rank's reason).
void check_groups(const fsdp::ShardingConfig& cfg, int context_parallel,
                  const runtime::MpiEnv& env);

// Collective: --checkpoint-dir, --save-model and --metrics-file's directory can be written.
void check_writable_outputs(const TrainOptions& o, const runtime::MpiEnv& env);

}  // namespace shardtrain::cli
