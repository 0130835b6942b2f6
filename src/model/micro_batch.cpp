#include "shardtrain/model/micro_batch.h"

namespace shardtrain::model {

MicroBatch context_split(const Batch& rows, int n, int r) {
  MicroBatch mb;
  mb.whole = rows;
  if (n > 1) mb.share = std::make_shared<const ContextShard>(context_shard(rows, n, r));
  return mb;
}

std::vector<MicroBatch> context_split(const std::vector<Batch>& batches, int n, int r) {
  std::vector<MicroBatch> out;
  out.reserve(batches.size());
  for (const Batch& b : batches) out.push_back(context_split(b, n, r));
  return out;
}

}  // namespace shardtrain::model
