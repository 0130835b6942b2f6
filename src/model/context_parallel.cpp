#include "shardtrain/model/context_parallel.h"

#include <ATen/ATen.h>

#include "shardtrain/runtime/error.h"

namespace shardtrain::model {

int64_t context_padded_length(int64_t T, int n) {
  const int64_t m = 2 * static_cast<int64_t>(n);
  return (T + m - 1) / m * m;
}

ZigzagChunks zigzag_chunks(int64_t Tp, int n, int r) {
  if (n < 1 || r < 0 || r >= n || Tp % (2 * n) != 0)
    throw runtime::Error("zigzag_chunks: rank " + std::to_string(r) + " of " + std::to_string(n) +
                         " over " + std::to_string(Tp) + " tokens");
  ZigzagChunks z;
  z.len = Tp / (2 * n);
  z.first = r * z.len;
  z.second = (2 * n - 1 - r) * z.len;
  return z;
}

at::Tensor zigzag_index(int64_t Tp, int n, int r) {
  const ZigzagChunks z = zigzag_chunks(Tp, n, r);
  return at::cat({at::arange(z.first, z.first + z.len, at::kLong),
                  at::arange(z.second, z.second + z.len, at::kLong)});
}

ContextShard context_shard(const Batch& full, int n, int r) {
  if (full.aligned_labels) throw runtime::Error("context_shard: the batch is already a share");
  ContextShard s;
  s.n = n;
  s.rank = r;
  const int64_t B = full.tokens.size(0);
  const int64_t T = full.tokens.size(1);
  s.real_len = T;
  s.full_len = context_padded_length(T, n);
  const int64_t pad = s.full_len - T;
  if (B == 0) {  // a rank without rows still joins every collective, with nothing to cut
    s.local = full;
    s.local.aligned_labels = true;
    return s;
  }
  const auto i64 = at::TensorOptions().dtype(at::kLong);
  // Label t is token t + 1's label: the shift happens on the whole row, before the cut.
  at::Tensor aligned = at::full({B, s.full_len}, -100, i64);
  if (T > 1) aligned.narrow(1, 0, T - 1).copy_(full.labels.narrow(1, 1, T - 1));
  at::Tensor tokens = at::zeros({B, s.full_len}, i64);
  tokens.narrow(1, 0, T).copy_(full.tokens);
  at::Tensor pos = full.positions.defined()
                       ? full.positions.to(at::kLong)
                       : at::arange(T, i64).unsqueeze(0).expand({B, T}).contiguous();
  s.reach = pos.max().item<int64_t>() + 1;  // transformers: max(position_ids) + 1, before padding
  if (pad > 0) {
    // Padding continues the row's last document: later than every real token, seen by none.
    const at::Tensor last = pos.narrow(1, T - 1, 1);
    pos = at::cat({pos, last + at::arange(1, pad + 1, i64).unsqueeze(0)}, 1);
  }
  const bool packed = T > 1 && pos.narrow(1, 1, s.full_len - 1).eq(0).any().item<bool>();
  if (packed) {
    at::Tensor starts = pos.eq(0);
    starts.select(1, 0).fill_(true);  // every row opens a document
    s.doc = starts.to(at::kLong).cumsum(1);
  }
  const at::Tensor index = zigzag_index(s.full_len, n, r);
  s.local.tokens = tokens.index_select(1, index);
  s.local.labels = aligned.index_select(1, index);
  s.local.positions = pos.index_select(1, index);
  s.local.aligned_labels = true;
  s.local.sample_ids = full.sample_ids;
  s.local.epoch = full.epoch;
  return s;
}

}  // namespace shardtrain::model
