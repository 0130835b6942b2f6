#include "shardtrain/model/masked_block.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <limits>

namespace shardtrain::model {
namespace {

constexpr int64_t kKeyAlign = 16;  // the memory-efficient kernel's mask rows: 16-element aligned
constexpr int64_t kLseAlign = 32;  // its log-sum-exp rows: padded to 32 queries

at::Tensor repeat_heads(const at::Tensor& x, int64_t rep) {
  return rep == 1 ? x : x.repeat_interleave(rep, 1);
}

// [B, nh, L, D] -> [B, nkv, L, D] fp32: the query heads' gradients summed onto their kv head.
at::Tensor sum_heads(const at::Tensor& g, int64_t nkv) {
  const at::Tensor f = g.to(at::kFloat);
  const int64_t rep = g.size(1) / nkv;
  if (rep == 1) return f;
  return f.view({g.size(0), nkv, rep, g.size(2), g.size(3)}).sum(2);
}

}  // namespace

BlockPath block_path(bool cuda, at::ScalarType dtype, bool masked, int64_t head_dim) {
  if (!cuda) return BlockPath::kMath;
  const bool half = dtype == at::kBFloat16 || dtype == at::kHalf;
  if (!masked) return half && head_dim <= 256 ? BlockPath::kFlash : BlockPath::kMath;
  // The memory-efficient kernel reads heads in 16-byte vectors, any float type.
  const bool aligned = head_dim % 8 == 0 && head_dim <= 256;
  if (aligned && (half || dtype == at::kFloat)) return BlockPath::kMasked;
  return BlockPath::kMath;
}

int64_t math_span_rows(int64_t batch, int64_t heads, int64_t keys, bool cuda) {
  const int64_t budget = cuda ? int64_t{1} << 26 : int64_t{1} << 18;
  return std::max<int64_t>(16, budget / std::max<int64_t>(1, batch * heads * keys));
}

at::Tensor block_keys(const at::Tensor& mask, bool causal, int64_t lq, int64_t lk,
                      const at::Device& device) {
  const at::Tensor all =
      mask.defined() ? mask : at::ones({1, 1, lq, lk}, at::TensorOptions(device).dtype(at::kBool));
  if (!causal) return all;
  const auto opts = at::TensorOptions(device).dtype(at::kLong);
  const at::Tensor tri = at::arange(lq, opts).unsqueeze(1).ge(at::arange(lk, opts).unsqueeze(0));
  return all.logical_and(tri);
}

at::Tensor additive_mask(const at::Tensor& keys, at::ScalarType dtype, int64_t batch, int64_t heads,
                         bool open_empty_rows) {
  const int64_t b = keys.size(0), lq = keys.size(2), lk = keys.size(3);
  const int64_t padded = (lk + kKeyAlign - 1) / kKeyAlign * kKeyAlign;
  at::Tensor seen = keys;
  if (open_empty_rows) seen = seen.logical_or(seen.any(-1, /*keepdim=*/true).logical_not());
  at::Tensor bias = at::full({b, 1, lq, padded}, -std::numeric_limits<double>::infinity(),
                             keys.options().dtype(dtype));
  bias.narrow(3, 0, lk).masked_fill_(seen, 0.0);
  return bias.narrow(3, 0, lk).expand({batch, heads, lq, lk});
}

BlockOut masked_block_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                const at::Tensor& keys) {
  const int64_t nh = q.size(1), rep = nh / k.size(1);
  const at::Tensor bias =
      additive_mask(keys, q.scalar_type(), q.size(0), nh, /*open_empty_rows=*/true);
  auto res = at::_scaled_dot_product_efficient_attention(
      q, repeat_heads(k, rep), repeat_heads(v, rep), bias, /*compute_log_sumexp=*/true);
  const at::Tensor none = keys.any(-1).logical_not();  // [B or 1, 1, Lq]: rows that see no key
  BlockOut b;
  b.out = std::get<0>(res).to(at::kFloat).masked_fill_(none.unsqueeze(-1), 0.0);
  b.lse = std::get<1>(res).narrow(2, 0, q.size(2)).to(at::kFloat);
  b.lse.masked_fill_(none, -std::numeric_limits<double>::infinity());
  return b;
}

BlockGrads masked_block_attention_backward(const at::Tensor& dout, const at::Tensor& q,
                                           const at::Tensor& k, const at::Tensor& v,
                                           const at::Tensor& out, const at::Tensor& lse,
                                           const at::Tensor& keys) {
  const int64_t nh = q.size(1), nkv = k.size(1), rep = nh / nkv, lq = q.size(2);
  // The row's whole log-sum-exp (finite: every query sees itself on its diagonal block), so a
  // masked key's probability is exactly 0 and a row that sees none here adds nothing.
  const at::Tensor bias =
      additive_mask(keys, q.scalar_type(), q.size(0), nh, /*open_empty_rows=*/false);
  at::Tensor lse_padded =
      at::zeros({lse.size(0), lse.size(1), (lq + kLseAlign - 1) / kLseAlign * kLseAlign},
                lse.options().dtype(at::kFloat));
  lse_padded.narrow(2, 0, lq).copy_(lse);
  const at::Tensor no_rng = at::zeros({}, at::kLong);  // no dropout: the seed is never read
  auto g = at::_scaled_dot_product_efficient_attention_backward(
      dout.to(q.scalar_type()), q, repeat_heads(k, rep), repeat_heads(v, rep), bias,
      out.to(q.scalar_type()), lse_padded, no_rng, no_rng, 0.0, {true, true, true, false});
  return {std::get<0>(g).to(at::kFloat), sum_heads(std::get<1>(g), nkv),
          sum_heads(std::get<2>(g), nkv)};
}

}  // namespace shardtrain::model
