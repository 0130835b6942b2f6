#include "shardtrain/model/token_layout.h"

#include <ATen/ATen.h>

#include <cmath>
#include <limits>
#include <optional>

#include "shardtrain/model/ring_attention.h"
#include "shardtrain/model/rotary.h"
#include "shardtrain/runtime/device_copy.h"
#include "shardtrain/runtime/error.h"

namespace shardtrain::model {

namespace {

// The layout's RoPE part from tables cos, sin [max_pos, D]: rows at 0..T-1 (index undefined), or
// each token's place (index [B * T] on the device), gathered or left to the rotary kernel.
void put_tables(TokenLayout& l, const at::Tensor& cos, const at::Tensor& sin,
                const at::Tensor& index, int64_t B, int64_t T, bool gather) {
  if (!index.defined()) {
    l.cos = cos.narrow(0, 0, T);
    l.sin = sin.narrow(0, 0, T);
  } else if (gather) {
    l.cos = cos.index_select(0, index).view({B, T, -1}).unsqueeze(1);  // [B, 1, T, D]
    l.sin = sin.index_select(0, index).view({B, T, -1}).unsqueeze(1);
  } else {
    l.positions = index.view({B, T});
    l.table_cos = cos;
    l.table_sin = sin;
  }
}

// The sliding layers' copy of l with the local tables (Gemma 3); the masks are shared.
void put_local(TokenLayout& l, const Rotary& rope, const at::Tensor& index, int64_t B, int64_t T,
               bool gather) {
  if (!rope.local_cos.defined()) return;
  auto local = std::make_shared<TokenLayout>(l);
  put_tables(*local, rope.local_cos, rope.local_sin, index, B, T, gather);
  l.local = std::move(local);
}

}  // namespace

TokenLayout cache_token_layout(const Rotary& rope, const at::Tensor& positions, KvCache& cache,
                               const at::Device& device) {
  TokenLayout l;
  l.kv_cache = &cache;
  const at::Tensor pos = positions.to(at::kLong).clamp_min(0).contiguous();
  const int64_t B = pos.size(0), T = pos.size(1);
  const at::Tensor index = runtime::to_device(pos.flatten(), device);
  put_tables(l, rope.cos, rope.sin, index, B, T, /*gather=*/true);
  // longrope: a row takes the long factors once this step reaches past the original context, as
  // transformers picks them per forward (max(position_ids) + 1) for that row alone.
  if (rope.long_cos.defined() && B * T > 0) {
    const at::Tensor reach = std::get<0>(positions.to(at::kLong).max(1)) + 1;  // [B], host
    const at::Tensor long_rows =
        runtime::to_device(reach.gt(rope.long_after), device).view({B, 1, 1, 1});
    TokenLayout long_tables;
    put_tables(long_tables, rope.long_cos, rope.long_sin, index, B, T, /*gather=*/true);
    l.cos = at::where(long_rows, long_tables.cos, l.cos);
    l.sin = at::where(long_rows, long_tables.sin, l.sin);
  }
  put_local(l, rope, index, B, T, /*gather=*/true);
  return l;
}

TokenLayout token_layout(const Rotary& rope, const at::Tensor& positions, int64_t T,
                         const at::Device& device, at::ScalarType dtype, bool gather, bool varlen) {
  TokenLayout l;
  // A row whose positions never restart is one document: the plain causal path, no gather.
  const bool packed = positions.defined() && positions.size(0) > 0 && T > 1 &&
                      positions.narrow(1, 1, T - 1).eq(0).any().item<bool>();
  // longrope: the long factors' tables once the batch reaches past the original context
  // (transformers: max(position_ids) + 1).
  const auto reach = [&](int64_t positions_seen) {
    const bool long_rope = rope.long_cos.defined() && positions_seen > rope.long_after;
    return std::make_pair(long_rope ? rope.long_cos : rope.cos,
                          long_rope ? rope.long_sin : rope.sin);
  };
  if (!packed) {
    const auto [cos, sin] = reach(T);
    put_tables(l, cos, sin, {}, 1, T, gather);
    put_local(l, rope, {}, 1, T, gather);
    return l;
  }
  const int64_t B = positions.size(0);
  const at::Tensor pos = positions.to(at::kLong).contiguous();  // [B, T], host
  const at::Tensor index = runtime::to_device(pos.flatten(), device);
  const auto [cos, sin] = reach(rope.long_cos.defined() ? pos.max().item<int64_t>() + 1 : T);
  put_tables(l, cos, sin, index, B, T, gather);
  at::Tensor starts = pos.eq(0);
  starts.select(1, 0).fill_(true);  // every row opens a document
  if (varlen && packed_rows_use_varlen(device.is_cuda(), dtype)) {
    const at::Tensor first =
        starts.flatten().nonzero().flatten();  // flat index of each document's first token
    const at::Tensor bounds = at::cat({first, at::full({1}, B * T, at::kLong)});
    l.max_doc_len =
        (bounds.narrow(0, 1, bounds.size(0) - 1) - bounds.narrow(0, 0, bounds.size(0) - 1))
            .max()
            .item<int64_t>();
    l.cu_seqlens = runtime::to_device(bounds.to(at::kInt), device);
  } else {
    const at::Tensor doc =
        runtime::to_device(starts.cumsum(1), device);  // [B, T]: document number in the row
    const at::Tensor same = doc.unsqueeze(2).eq(doc.unsqueeze(1));  // [B, T, T]
    const at::Tensor causal =
        at::ones({T, T}, at::TensorOptions().dtype(at::kBool).device(device)).tril();
    l.same_doc = same.logical_and(causal).unsqueeze(1);  // [B, 1, T, T]
  }
  put_local(l, rope, index, B, T, gather);
  return l;
}

TokenLayout context_token_layout(const Rotary& rope, const ContextShard& share, ContextRing ring,
                                 const at::Device& device) {
  TokenLayout l;
  const at::Tensor pos = share.local.positions;  // [B, L] host
  const int64_t B = pos.size(0), L = pos.size(1);
  // Padding's positions run past the row; no real token sees them, so the table's last serves.
  const at::Tensor index =
      runtime::to_device(pos.clamp_max(rope.cos.size(0) - 1).flatten(), device);
  // longrope picks its tables by the whole batch's furthest position, which context_shard kept.
  const bool long_rope = rope.long_cos.defined() && share.reach > rope.long_after;
  const at::Tensor& cos = long_rope ? rope.long_cos : rope.cos;
  const at::Tensor& sin = long_rope ? rope.long_sin : rope.sin;
  put_tables(l, cos, sin, index, B, L, /*gather=*/true);
  l.positions = index.view({B, L});
  l.table_cos = cos;
  l.table_sin = sin;
  auto ctx = std::make_shared<ContextLayout>();
  ctx->ring = std::move(ring);
  ctx->full_len = share.full_len;
  if (share.doc.defined()) ctx->doc = runtime::to_device(share.doc, device);
  for (int r = 0; r < ctx->ring.size; ++r)
    ctx->places.push_back(
        runtime::to_device(zigzag_index(share.full_len, ctx->ring.size, r), device));
  l.context = std::move(ctx);
  if (rope.local_cos.defined()) {
    auto local = std::make_shared<TokenLayout>(l);
    put_tables(*local, rope.local_cos, rope.local_sin, index, B, L, /*gather=*/true);
    local->table_cos = rope.local_cos;
    local->table_sin = rope.local_sin;
    l.local = std::move(local);
  }
  return l;
}

bool packed_rows_use_varlen(bool cuda, at::ScalarType dtype) {
  return cuda && (dtype == at::kBFloat16 || dtype == at::kHalf);
}

at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            bool native_gqa, int64_t window) {
  const int64_t rep = q.size(1) / k.size(1);
  if (window > 0 && window < q.size(2))
    return masked_attention(q, k, v, sliding_band(q.size(2), window, q.device()));
  constexpr int64_t kMath =
      0;  // sdp::SDPBackend::math: enable_gqa would repeat K and V inside it anyway
  const bool gqa = rep > 1 && native_gqa &&
                   at::_fused_sdp_choice(q, k, v, {}, 0.0, true, std::nullopt, true) != kMath;
  if (rep == 1 || gqa)
    return at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true, std::nullopt,
                                            gqa);
  const int64_t B = k.size(0), nkv = k.size(1), T = k.size(2), D = k.size(3);
  // repeat_kv: each kv head serves `rep` consecutive query heads
  auto kr = k.unsqueeze(2).expand({B, nkv, rep, T, D}).reshape({B, nkv * rep, T, D});
  auto vr = v.unsqueeze(2).expand({B, nkv, rep, T, D}).reshape({B, nkv * rep, T, D});
  return at::scaled_dot_product_attention(q, kr, vr, {}, 0.0, /*is_causal=*/true);
}

at::Tensor sliding_band(int64_t T, int64_t window, const at::Device& device) {
  const auto pos = at::arange(T, at::TensorOptions().dtype(at::kLong).device(device));
  const auto back = pos.unsqueeze(1) - pos.unsqueeze(0);  // [T, T]: query i minus key j
  return back.ge(0).logical_and(back.lt(window));
}

at::Tensor layout_attention(const TokenLayout& layout, const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& v, int64_t window, double softcap) {
  if (layout.context) return ring_attention(*layout.context, q, k, v, window, softcap);
  const int64_t T = q.size(2);
  if (softcap > 0) {
    if (layout.cu_seqlens.defined())
      throw runtime::Error(
          "soft-capped attention needs the packed rows' mask (token_layout's "
          "varlen = false)");
    at::Tensor mask = layout.same_doc;
    if (window > 0 && window < T) {
      const at::Tensor band = sliding_band(T, window, q.device());
      mask = mask.defined() ? mask.logical_and(band) : band;
    }
    return softcapped_attention(q, k, v, mask, softcap);
  }
  if (!layout.packed()) return causal_attention(q, k, v, /*native_gqa=*/true, window);
  const int64_t B = q.size(0), nh = q.size(1), D = q.size(3);
  if (layout.cu_seqlens.defined()) {
    // Flash's variable-length kernel over the flattened batch: [tokens, heads, D], GQA native.
    const auto flat = [&](const at::Tensor& x) {
      return x.transpose(1, 2).reshape({B * T, x.size(1), D});
    };
    const std::optional<int64_t> left =
        window > 0 ? std::optional<int64_t>(window - 1) : std::nullopt;
    const std::optional<int64_t> right = window > 0 ? std::optional<int64_t>(0) : std::nullopt;
    const auto out = std::get<0>(at::_flash_attention_forward(
        flat(q), flat(k), flat(v), layout.cu_seqlens, layout.cu_seqlens, layout.max_doc_len,
        layout.max_doc_len, 0.0, /*is_causal=*/true,
        /*return_debug_mask=*/false, std::nullopt, left, right));
    return out.view({B, T, nh, D}).transpose(1, 2);
  }
  at::Tensor mask = layout.same_doc;
  if (window > 0 && window < T) mask = mask.logical_and(sliding_band(T, window, q.device()));
  return masked_attention(q, k, v, mask);
}

at::Tensor masked_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const at::Tensor& mask) {
  const int64_t rep = q.size(1) / k.size(1);
  const auto kr = rep == 1 ? k : k.repeat_interleave(rep, 1);  // repeat_kv
  const auto vr = rep == 1 ? v : v.repeat_interleave(rep, 1);
  return at::scaled_dot_product_attention(q, kr, vr, mask, 0.0, /*is_causal=*/false);
}

at::Tensor softcapped_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                const at::Tensor& mask, double softcap) {
  const int64_t B = k.size(0), nkv = k.size(1), T = k.size(2), D = k.size(3);
  const int64_t rep = q.size(1) / nkv;
  const auto kr = k.unsqueeze(2).expand({B, nkv, rep, T, D}).reshape({B, nkv * rep, T, D});
  const auto vr = v.unsqueeze(2).expand({B, nkv, rep, T, D}).reshape({B, nkv * rep, T, D});
  auto s = at::matmul(q, kr.transpose(2, 3)) * (1.0 / std::sqrt(static_cast<double>(D)));
  s = at::tanh(s / softcap) * softcap;
  const at::Tensor keys =
      mask.defined() ? mask : at::ones({q.size(2), T}, q.options().dtype(at::kBool)).tril();
  s = s.masked_fill(keys.logical_not(), -std::numeric_limits<double>::infinity());
  return at::matmul(at::softmax(s, -1, at::kFloat).to(q.scalar_type()), vr);
}

}  // namespace shardtrain::model
