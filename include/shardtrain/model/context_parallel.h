// Context parallelism's layout: each row (padded to a multiple of 2N tokens) is cut into 2N
// chunks and rank r of a context group of N holds chunks r and 2N-1-r (the zigzag that gives
// every rank the same share of causal attention). Attention over the whole row runs as a ring
// (model/ring_attention.h); everything else in a layer is per token and runs on the rank's own.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "shardtrain/model/batch.h"

namespace shardtrain::model {

// Pure: the smallest multiple of 2n at least T (rows are padded up to it).
int64_t context_padded_length(int64_t T, int n);
// Pure: the first global token of each of rank r's two chunks in a padded row of Tp tokens.
struct ZigzagChunks {
  int64_t len = 0;     // Tp / 2n
  int64_t first = 0;   // chunk r starts here
  int64_t second = 0;  // chunk 2n-1-r starts here
};
ZigzagChunks zigzag_chunks(int64_t Tp, int n, int r);
// [2 * Tp / 2n] int64: rank r's tokens' places in the padded row, chunk r then chunk 2n-1-r.
at::Tensor zigzag_index(int64_t Tp, int n, int r);

// The ring a context group forms: exchange sends `send` to the next rank and receives the
// previous rank's buffer of the same size into `recv`, returning what waits for both.
using RingExchange =
    std::function<std::function<void()>(const at::Tensor& send, const at::Tensor& recv)>;
struct ContextRing {
  int size = 1, rank = 0;
  RingExchange exchange;
};

// A rank's share of a batch, and what its attention needs to know of the whole row.
struct ContextShard {
  Batch local;           // the rank's tokens; labels aligned (Batch::aligned_labels); positions
                         // are each token's position in its document, as in the whole row
  int n = 1, rank = 0;   // the group's size and this rank's place in it
  int64_t full_len = 0;  // Tp: the padded row
  int64_t real_len = 0;  // T: the row before padding
  int64_t reach = 0;     // the whole batch's furthest position + 1 (longrope's choice of tables)
  at::Tensor doc;        // [B, Tp] int64: each token's document in its row; undefined: one per row
};

// Rank r's share of `full` under a context group of n: rows padded to context_padded_length
// (padding takes label -100 and positions that continue the row's last document, so no real
// token attends to it), labels aligned with their tokens (label t is token t's target) before
// the cut, so a chunk's last token keeps its target from the next chunk.
ContextShard context_shard(const Batch& full, int n, int r);

// What a layer's attention reads under context parallelism (TokenLayout::context): the ring, the
// zigzag geometry and each token's document, on the device.
struct ContextLayout {
  ContextRing ring;
  int64_t full_len = 0;
  at::Tensor doc;                  // [B, Tp] int64 on the device; undefined: one document per row
  std::vector<at::Tensor> places;  // [N]: each rank's zigzag_index on the device, made once a pass
};

}  // namespace shardtrain::model
