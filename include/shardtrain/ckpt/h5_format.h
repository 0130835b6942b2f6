// The checkpoint file (docs/checkpoint-format.md): one HDF5 file with a group per tensor state,
// holding one float32 dataset in logical shape per tensor with its "crc32" attribute, and every
// value as a root attribute. One replica's ranks write it in parallel with collective MPI-IO,
// each its own slices; any world size and strategy reads it back. It knows nothing of what the
// state is: whatever the registry holds is written and read.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <string>

#include "shardtrain/ckpt/checkpoint_attrs.h"
#include "shardtrain/ckpt/state_registry.h"

namespace shardtrain::ckpt {

// Lustre layout of new checkpoint files, passed as MPI-IO hints (striping_factor/_unit); the
// stripe size is also the HDF5 alignment of large datasets. 0: the file system's default.
struct StripeOptions {
  int count = 0;
  int64_t size = 0;  // bytes
};

// Collective over comm (every rank of the world, in any communicator that spans it); only
// snap.writer ranks touch the file. No closing barrier: a rank that fails here must not leave
// the others waiting in one.
void write_file(const std::string& path, MPI_Comm comm, const Snapshot& snap,
                const StripeOptions& stripe);

// The bytes snap's tensors take in the file (metadata aside).
int64_t tensor_bytes(const Snapshot& snap);

// Collective over reg.ranks().world: checks the format, lets every state refuse the file, reads
// every state's tensor slices into its live views, hands every state its values, then verifies
// every dataset's CRC-32 across the shard group. All ranks throw alike: ResumeRefused,
// AgreedUsageError (a foreign, damaged or mismatched file) or Error; errors name the file and
// the tensor, or the state whose values are missing.
void read_file(const std::string& path, StateRegistry& reg);

}  // namespace shardtrain::ckpt
