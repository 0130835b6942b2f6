// CRC-32C (Castagnoli, RFC 3720), the checksum of TFRecord framing (TensorBoard event files),
// and the TFRecord mask that keeps a CRC of data holding CRCs from being one of them.
#pragma once
#include <cstddef>
#include <cstdint>

namespace shardtrain::runtime {

uint32_t crc32c(const void* data, size_t nbytes,
                uint32_t crc = 0);   // crc: continue from a previous value
uint32_t mask_crc32c(uint32_t crc);  // rotate right by 15, add 0xa282ead8

}  // namespace shardtrain::runtime
