#include "shardtrain/runtime/checksum.h"

#include <zlib.h>

#include <algorithm>

namespace shardtrain::runtime {

uint32_t crc32_bytes(const void* data, size_t nbytes, uint32_t crc) {
  const auto* p = static_cast<const Bytef*>(data);
  uLong c = crc;
  for (size_t left = nbytes; left > 0;) {
    const uInt n = static_cast<uInt>(std::min<size_t>(left, size_t{1} << 30));
    c = crc32(c, p, n);
    p += n;
    left -= n;
  }
  return static_cast<uint32_t>(c);
}

}  // namespace shardtrain::runtime
