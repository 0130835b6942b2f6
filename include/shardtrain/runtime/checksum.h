// CRC-32 (zlib's, the one PNG and the checkpoint format use) over any number of bytes: zlib
// takes at most 4 GiB a call, so larger buffers go in 1 GiB chunks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace shardtrain::runtime {

uint32_t crc32_bytes(const void* data, size_t nbytes,
                     uint32_t crc = 0);  // crc: continue from a previous value

// One slice of a flat tensor and the CRC-32 of its bytes: elements [offset, offset + numel).
// Three int64s, so a vector of rows travels through MPI as MPI_INT64_T (3 per row).
struct CrcRow {
  int64_t offset = -1;  // -1: this rank holds no slice of that tensor
  int64_t numel = -1;
  int64_t crc = -1;
  bool holds() const { return offset >= 0 && numel > 0; }
};
static_assert(sizeof(CrcRow) == 3 * sizeof(int64_t), "CrcRow is sent as 3 MPI_INT64_T");

// The CRC-32 of the slices' concatenation in offset order, as zlib would compute it over the
// whole tensor's bytes (crc32_combine); rows that hold nothing are skipped.
uint32_t combine_crc_rows(std::vector<CrcRow> rows, int64_t bytes_per_element);

}  // namespace shardtrain::runtime
