#include "shardtrain/ckpt/crc_assembly.h"

#include <ATen/ATen.h>

#include <string>

#include "shardtrain/runtime/checksum.h"
#include "shardtrain/runtime/error.h"

namespace shardtrain::ckpt {

uint32_t crc_of(const at::Tensor& t) {
  const auto c = t.to(at::kCPU).contiguous();
  return runtime::crc32_bytes(c.data_ptr(), c.nbytes());
}

std::vector<runtime::CrcRow> local_crc_rows(const std::vector<TensorGroup>& groups) {
  std::vector<runtime::CrcRow> mine;
  for (const auto& g : groups)
    for (const auto& spec : g.datasets) {
      runtime::CrcRow row;
      for (const auto& s : g.slices)
        if (s.name == spec.name) row = {s.offset, s.numel, static_cast<int64_t>(crc_of(s.data))};
      mine.push_back(row);
    }
  return mine;
}

std::vector<uint32_t> assemble_crcs(MPI_Comm comm, const std::vector<runtime::CrcRow>& mine) {
  const size_t D = mine.size();
  int n = 1;
  MPI_CHECK(MPI_Comm_size(comm, &n));
  std::vector<runtime::CrcRow> all(D * n);
  const int count = static_cast<int>(3 * D);  // CrcRow is three int64s
  MPI_CHECK(MPI_Allgather(mine.data(), count, MPI_INT64_T, all.data(), count, MPI_INT64_T, comm));
  std::vector<uint32_t> out(D);
  for (size_t d = 0; d < D; ++d) {
    std::vector<runtime::CrcRow> slices;
    for (int r = 0; r < n; ++r) slices.push_back(all[r * D + d]);
    out[d] = runtime::combine_crc_rows(std::move(slices), sizeof(float));
  }
  return out;
}

}  // namespace shardtrain::ckpt
