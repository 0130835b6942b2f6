#include "shardtrain/model/kv_cache.h"

#include <ATen/ATen.h>

#include <cmath>
#include <limits>

#include "shardtrain/model/token_layout.h"
#include "shardtrain/runtime/device_copy.h"
#include "shardtrain/runtime/error.h"

namespace shardtrain::model {

KvCache::KvCache(const ModelConfig& cfg, int64_t rows, int64_t max_len,
                 const at::TensorOptions& options) {
  for (int64_t l = 0; l < cfg.num_layers; ++l) {
    k_.push_back(at::zeros({rows, cfg.num_kv_heads, max_len, cfg.head_dim()}, options));
    v_.push_back(at::zeros_like(k_.back()));
  }
  slot_pos_ = at::full({rows, max_len}, -1, options.dtype(at::kLong));
}

void KvCache::begin_step(const at::Tensor& positions) {
  step_ = positions.size(1);
  if (filled_ + step_ > max_len())
    throw runtime::Error("KV cache: " + std::to_string(filled_ + step_) + " slots needed, " +
                         std::to_string(max_len()) + " allocated");
  step_pos_ = runtime::to_device(positions.to(at::kLong), slot_pos_.device());
  slot_pos_.narrow(1, filled_, step_).copy_(step_pos_);
  masks_.clear();
}

at::Tensor cache_mask(const at::Tensor& slot_pos, const at::Tensor& step_pos, int64_t window) {
  const int64_t L = slot_pos.size(1), n = step_pos.size(1);
  const at::Tensor key = slot_pos.unsqueeze(1);    // [rows, 1, L]
  const at::Tensor query = step_pos.unsqueeze(2);  // [rows, n, 1]
  at::Tensor see = key.ge(0) & query.ge(0) & key.le(query);
  if (window > 0) see = see & key.gt(query - window);
  // Its own slot (the last n are this step's): a padding query attends to something.
  const auto opts = slot_pos.options();
  const at::Tensor own =
      at::arange(L, opts).unsqueeze(0).eq(at::arange(L - n, L, opts).unsqueeze(1));
  return (see | own.unsqueeze(0)).unsqueeze(1);  // [rows, 1, n, L]
}

at::Tensor KvCache::attend(int64_t layer, const at::Tensor& q, const at::Tensor& k,
                           const at::Tensor& v, int64_t window, double softcap) {
  at::Tensor& K = k_[static_cast<size_t>(layer)];
  at::Tensor& V = v_[static_cast<size_t>(layer)];
  K.narrow(2, filled_, step_).copy_(k);
  V.narrow(2, filled_, step_).copy_(v);
  const int64_t L = filled_ + step_;
  const at::Tensor keys = K.narrow(2, 0, L), values = V.narrow(2, 0, L);
  at::Tensor& mask = masks_[window];
  if (!mask.defined()) mask = cache_mask(slot_pos_.narrow(1, 0, L), step_pos_, window);
  if (softcap > 0) return softcapped_attention(q, keys, values, mask, softcap);
  return at::scaled_dot_product_attention(q, keys, values, mask, 0.0, /*is_causal=*/false,
                                          std::nullopt, /*enable_gqa=*/true);
}

void KvCache::end_step() { filled_ += step_; }

void KvCache::keep_rows(const at::Tensor& keep) {
  const at::Tensor index = runtime::to_device(keep.to(at::kLong), slot_pos_.device());
  for (auto* caches : {&k_, &v_})
    for (at::Tensor& c : *caches) c = c.index_select(0, index);
  slot_pos_ = slot_pos_.index_select(0, index);
}

}  // namespace shardtrain::model
