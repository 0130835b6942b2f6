// A micro-batch as one rank trains or evaluates it: the loader's whole rows and, under context
// parallelism, this rank's share of their tokens. The split is a batch transform the training
// loop applies (context_split); the engine runs the share and the objective reads both.
#pragma once
#include <memory>
#include <vector>

#include "shardtrain/model/batch.h"
#include "shardtrain/model/context_parallel.h"

namespace shardtrain::model {

struct MicroBatch {
  Batch whole;                                // the rows, as the loader made them
  std::shared_ptr<const ContextShard> share;  // context parallelism: this rank's; null: whole rows
  const Batch& local() const { return share ? share->local : whole; }  // what this rank runs
};

// Rank r's micro-batches under a context group of n ranks (n == 1: the rows whole).
MicroBatch context_split(const Batch& rows, int n, int r);
std::vector<MicroBatch> context_split(const std::vector<Batch>& batches, int n, int r);

}  // namespace shardtrain::model
