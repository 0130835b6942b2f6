#include "shardtrain/ckpt/crc_assembly.h"

#include <ATen/ATen.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <string>

#include "shardtrain/runtime/checksum.h"
#include "shardtrain/runtime/error.h"

namespace shardtrain::ckpt {

uint32_t crc_of(const at::Tensor& t) {
  const auto c = t.to(at::kCPU).contiguous();
  return runtime::crc32_bytes(c.data_ptr(), c.nbytes());
}

std::vector<int64_t> local_crc_rows(const std::vector<TensorGroup>& groups) {
  std::vector<int64_t> mine;
  for (const auto& g : groups)
    for (const auto& spec : g.datasets) {
      std::array<int64_t, 3> row = {-1, -1, -1};
      for (const auto& s : g.slices) {
        if (s.name != spec.name) continue;
        row[0] = s.offset;
        row[1] = s.numel;
        row[2] = crc_of(s.data);
      }
      mine.insert(mine.end(), row.begin(), row.end());
    }
  return mine;
}

std::vector<uint32_t> combine_crc_rows(MPI_Comm comm, const std::vector<int64_t>& mine) {
  const size_t D = mine.size() / 3;
  int n = 1;
  MPI_CHECK(MPI_Comm_size(comm, &n));
  std::vector<int64_t> all(mine.size() * n);
  MPI_CHECK(MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_INT64_T, all.data(),
                          static_cast<int>(mine.size()), MPI_INT64_T, comm));
  std::vector<uint32_t> out(D);
  for (size_t d = 0; d < D; ++d) {
    std::vector<std::array<int64_t, 3>> parts;
    for (int r = 0; r < n; ++r) {
      const auto* row = &all[(r * D + d) * 3];
      if (row[0] >= 0 && row[1] > 0) parts.push_back({row[0], row[1], row[2]});
    }
    std::sort(parts.begin(), parts.end());
    uLong crc = crc32(0L, Z_NULL, 0);
    for (const auto& p : parts) crc = crc32_combine(crc, static_cast<uLong>(p[2]), static_cast<z_off_t>(4 * p[1]));
    out[d] = static_cast<uint32_t>(crc);
  }
  return out;
}

}  // namespace shardtrain::ckpt
