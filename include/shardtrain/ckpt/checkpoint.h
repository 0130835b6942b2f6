// Sharded checkpoints (docs/checkpoint-format.md): a save writes every registered state
// into one HDF5 file (h5_format.h) and publishes it in the checkpoint directory
// (checkpoint_dir.h); a load hands every state what it saved. The states a training run saves
// are registered in training_state.h.
#pragma once
#include <mpi.h>

#include <string>

#include "shardtrain/ckpt/checkpoint_dir.h"
#include "shardtrain/ckpt/crc_assembly.h"
#include "shardtrain/ckpt/h5_format.h"
#include "shardtrain/ckpt/state_registry.h"
#include "shardtrain/ckpt/training_state.h"

namespace shardtrain::ckpt {

// Collective over `comm` (every rank of the world): a lone file, without `latest`.
void write(const std::string& path, MPI_Comm comm, const Snapshot& snap,
           const StripeOptions& stripe = {});
// Collective over `comm`: checks the free space, writes final_path + ".tmp", makes every rank
// agree on its success (save_failure.h), then rank 0 publishes it (checkpoint_dir.h).
void write_and_publish(const std::string& final_path, MPI_Comm comm, const Snapshot& snap,
                       const StripeOptions& stripe, int keep);
// Collective over the registry's world: a synchronous write_and_publish of the live state.
void save(const std::string& final_path, const StateRegistry& reg, const StripeOptions& stripe = {},
          int keep = 0);
// Collective over the registry's world: restores every state (h5_format.h's read_file).
void load(const std::string& path, StateRegistry& reg);

}  // namespace shardtrain::ckpt
