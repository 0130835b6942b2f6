// Dataset checksums from shard pieces: each rank computes the CRC-32 of its own slices, and
// zlib's crc32_combine joins them in offset order into the CRC of the whole dataset, as zlib
// would compute it over the tensor's row-major bytes.
#pragma once
#include <ATen/core/Tensor.h>
#include <mpi.h>

#include <cstdint>
#include <vector>

#include "shardtrain/ckpt/stateful.h"
#include "shardtrain/runtime/checksum.h"

namespace shardtrain::ckpt {

// CRC-32 (zlib's) of a tensor's bytes, as the "crc32" attribute of each dataset stores it: the
// tensor is made contiguous on the CPU first, and any size is fine (zlib gets it in 1 GiB chunks).
uint32_t crc_of(const at::Tensor& t);

// This rank's row for every dataset of `groups`, in group then dataset order; an empty row
// (CrcRow{}) where it holds nothing.
std::vector<runtime::CrcRow> local_crc_rows(const std::vector<TensorGroup>& groups);

// Collective over comm: every rank's rows, combined per dataset into the CRC-32 of the whole
// (fp32 elements).
std::vector<uint32_t> assemble_crcs(MPI_Comm comm, const std::vector<runtime::CrcRow>& mine);

}  // namespace shardtrain::ckpt
