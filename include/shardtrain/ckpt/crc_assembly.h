// Dataset checksums from sharded pieces: each rank computes the CRC-32 of its own slices, and
// zlib's crc32_combine joins them in offset order into the CRC of the whole dataset, as zlib
// would compute it over the tensor's row-major bytes.
#pragma once
#include <ATen/core/Tensor.h>
#include <mpi.h>

#include <cstdint>
#include <vector>

#include "shardtrain/ckpt/stateful.h"

namespace shardtrain::ckpt {

// CRC-32 (zlib's) of a tensor's bytes, as the "crc32" attribute of each dataset stores it: the
// tensor is made contiguous on the CPU first, and any size is fine (zlib gets it in 1 GiB pieces).
uint32_t crc_of(const at::Tensor& t);

// This rank's (offset, numel, crc) row for every dataset of `groups`, in group then dataset
// order; -1 where it holds nothing.
std::vector<int64_t> local_crc_rows(const std::vector<TensorGroup>& groups);

// Collective over comm: every rank's rows, combined per dataset into the CRC-32 of the whole.
std::vector<uint32_t> combine_crc_rows(MPI_Comm comm, const std::vector<int64_t>& mine);

}  // namespace shardtrain::ckpt
