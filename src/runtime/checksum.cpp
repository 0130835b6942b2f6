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

uint32_t combine_crc_rows(std::vector<CrcRow> rows, int64_t bytes_per_element) {
  rows.erase(std::remove_if(rows.begin(), rows.end(), [](const CrcRow& r) { return !r.holds(); }),
             rows.end());
  std::sort(rows.begin(), rows.end(),
            [](const CrcRow& a, const CrcRow& b) { return a.offset < b.offset; });
  uLong crc = crc32(0L, Z_NULL, 0);
  for (const CrcRow& r : rows)
    crc = crc32_combine(crc, static_cast<uLong>(r.crc),
                        static_cast<z_off_t>(bytes_per_element * r.numel));
  return static_cast<uint32_t>(crc);
}

}  // namespace shardtrain::runtime
