// Decoding with a cache of keys and values: each decoder layer's K and V of every token seen so
// far, preallocated [batch, kv_heads, max_len, head_dim], so that a step computes only its new
// tokens. Rows are left-padded: slot j of row b holds position j - pad[b], and a padding slot is
// never attended to. Grouped-query attention reads the cache as it is (SDPA's enable_gqa).
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <vector>

#include "shardtrain/model/config.h"

namespace shardtrain::model {

class KvCache {
 public:
  // rows x max_len slots per layer, K and V in `options` (the compute dtype, on the device).
  KvCache(const ModelConfig& cfg, int64_t rows, int64_t max_len, const at::TensorOptions& options);
  int64_t rows() const { return slot_pos_.size(0); }
  int64_t filled() const { return filled_; }
  int64_t max_len() const { return slot_pos_.size(1); }

  // Before a step: its tokens' positions [rows, n] (host int64; -1: padding).
  void begin_step(const at::Tensor& positions);
  // Layer `layer`'s attention for the step: its k, v [rows, kv_heads, n, D] written to slots
  // [filled, filled + n), then q [rows, heads, n, D] over every filled slot of its row that it may
  // see (at or before its position; window > 0: at most window - 1 back). softcap > 0: Gemma's
  // soft-capped scores. A padding query sees only its own slot.
  at::Tensor attend(int64_t layer, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                    int64_t window, double softcap);
  void end_step();  // the step's slots count as filled

  // Keeps rows `keep` (host int64 indices, in their new order): finished rows leave the batch.
  void keep_rows(const at::Tensor& keep);

 private:
  std::vector<at::Tensor> k_, v_;        // [layers] [rows, kv_heads, max_len, D]
  at::Tensor slot_pos_;                  // [rows, max_len] int64 on the device: -1 empty or padding
  at::Tensor step_pos_;                  // [rows, n] this step's positions, on the device
  std::map<int64_t, at::Tensor> masks_;  // by window (0: none): [rows, 1, n, filled + n] bool,
                                         // made once a step
  int64_t filled_ = 0, step_ = 0;
};

// Pure: the step's mask [rows, 1, n, L] from the slots' positions [rows, L] (this step's
// included, in the last n) and the step's positions [rows, n] (-1: padding).
at::Tensor cache_mask(const at::Tensor& slot_pos, const at::Tensor& step_pos, int64_t window);

}  // namespace shardtrain::model
