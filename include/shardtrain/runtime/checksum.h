// CRC-32 (zlib's, the one PNG and the checkpoint format use) over any number of bytes: zlib
// takes at most 4 GiB a call, so larger buffers go in 1 GiB pieces.
#pragma once

#include <cstddef>
#include <cstdint>

namespace shardtrain::runtime {

uint32_t crc32_bytes(const void* data, size_t nbytes, uint32_t crc = 0);  // crc: continue from a previous value

}  // namespace shardtrain::runtime
