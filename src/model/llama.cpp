#include "shardtrain/model/llama.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <tuple>

#include "shardtrain/model/checkpointed.h"
#include "shardtrain/model/family.h"
#include "shardtrain/model/fused_ops.h"
#include "shardtrain/model/kv_cache.h"
#include "shardtrain/model/moe.h"
#include "shardtrain/runtime/error.h"

namespace shardtrain::model {

at::Tensor apply_rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  // x: [B, heads, T, D]; cos/sin: [T, R]. rotate_half(x) = cat(-x2, x1) over the first R dims;
  // the rest pass (Phi-4-mini's partial rotary).
  if (cos.size(-1) < x.size(-1)) {
    const int64_t r = cos.size(-1);
    return at::cat({apply_rotary(x.narrow(-1, 0, r), cos, sin), x.narrow(-1, r, x.size(-1) - r)},
                   -1);
  }
  const int64_t half = x.size(-1) / 2;
  auto x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);
  auto rotated = at::cat({-x2, x1}, -1);
  return x * cos + rotated * sin;
}

at::Tensor Projection::operator()(const at::Tensor& x) const {
  if (fp8 == Fp8Mode::kOff)
    return adapter ? lora_linear(x, weight, *adapter, bias) : at::linear(x, weight, bias);
  at::Tensor y = fp8_linear(x, weight, fp8);
  if (bias.defined()) y = y + bias;
  return adapter ? y + lora_update(x, *adapter) : y;
}

LayerWeights LayerWeights::bind(const ModelConfig& cfg, const WeightLookup& w, int64_t layer,
                                const LoraRun* lora, bool merge, Fp8Mode fp8,
                                const ExpertGroup* experts) {
  LayerWeights lw;
  const Family& fam = family(cfg.model_type);
  lw.window = cfg.attention_window(layer);
  lw.local_rope = fam.local_rope && cfg.sliding_layer(layer);
  lw.layer = layer;
  for (Proj p : layer_projections(cfg, layer)) {
    Projection& proj = lw.proj[static_cast<int>(p)];
    proj.weight = w(proj_weight_name(layer, p));
    proj.fp8 = fp8;
    if (has_bias(cfg, p)) proj.bias = w(proj_bias_name(layer, p));
    if (!lora || !lora->cfg->targets_proj(p)) continue;
    LoraAdapter a;
    a.a = lora->adapter(lora_name(layer, p, 'A'));
    a.b = lora->adapter(lora_name(layer, p, 'B'));
    a.scale = lora->cfg->scale();
    a.dropout = lora->train ? lora->cfg->dropout : 0.0;
    // A mask per module and row, as PEFT draws one per module: the row's seed mixed with the layer
    // and the projection.
    if (a.dropout > 0) a.row_seeds = module_seeds(lora->row_seeds, layer, static_cast<int>(p));
    a.tokens = lora->tokens;
    proj.adapter = std::move(a);
  }
  for (const Merged m : kMerged) {
    // Phi-3's checkpoint holds the merged weights themselves: they run merged on every path.
    if (fam.fused_checkpoint) {
      lw.merged[static_cast<int>(m)] = lw[merged_proj(m)];
      continue;
    }
    if (!merge) break;
    if (m == Merged::kGateUp && cfg.moe_layer(layer)) continue;  // experts, no gate and up
    const auto members = merged_members(m);
    // A member with an adapter runs on its own: LoRA's update is per projection.
    if (std::any_of(members.begin(), members.end(),
                    [&lw](Proj p) { return lw[p].adapter.has_value(); }))
      continue;
    Projection& proj = lw.merged[static_cast<int>(m)];
    proj.weight = w(merged_weight_name(layer, m));
    proj.fp8 = fp8;
    if (has_bias(cfg, members.front())) proj.bias = w(merged_bias_name(layer, m));
  }
  for (const LayerNormSpec& n : layer_norms(cfg))
    lw.norms[static_cast<int>(n.role)] = w(names::layer(layer, n.local));
  if (cfg.moe_layer(layer))
    lw.moe = std::make_shared<const MoeWeights>(moe_weights(cfg, w, layer, experts));
  return lw;
}

namespace {

// q, k, v [B, T, heads * D] each: one matmul over the merged weights where bound, else three.
std::array<at::Tensor, 3> qkv_projections(const ModelConfig& cfg, const LayerWeights& w,
                                          const at::Tensor& h) {
  if (!w[Merged::kQKV].weight.defined()) return {w[Proj::kQ](h), w[Proj::kK](h), w[Proj::kV](h)};
  const int64_t D = cfg.head_dim();
  const auto parts = w[Merged::kQKV](h).split_with_sizes(
      {cfg.num_heads * D, cfg.num_kv_heads * D, cfg.num_kv_heads * D}, -1);
  return {parts[0], parts[1], parts[2]};
}

// act(gate) * up: one matmul over the merged weights and the fused kernel where they serve.
at::Tensor gated_mlp(const ModelConfig& cfg, const LayerWeights& w, const at::Tensor& m,
                     LayerPath path) {
  if (w[Merged::kGateUp].weight.defined()) {
    const at::Tensor gu = w[Merged::kGateUp](m);  // [B, T, 2F]
    if (fused_kernels_available(gu) && fused_swiglu_supports(cfg.hidden_act))
      return fused_swiglu_merged(gu);
    const auto halves = gu.chunk(2, -1);
    return activation(cfg.hidden_act, halves[0]) * halves[1];
  }
  const auto gate = w[Proj::kGate](m);
  const auto up = w[Proj::kUp](m);
  if (path.fused && fused_kernels_available(gate) && fused_swiglu_supports(cfg.hidden_act))
    return fused_swiglu(gate, up);
  return path.selective ? checkpointed_gated(cfg.hidden_act, gate, up)
                        : activation(cfg.hidden_act, gate) * up;
}

// The layer's norm of role r, in the family's style, where the family has one; x where it has none.
struct LayerNorms {
  const LayerWeights& w;
  NormWeight style;
  double eps;
  LayerPath path;
  at::Tensor operator()(NormRole r, const at::Tensor& x) const {
    const at::Tensor& weight = w.norm(r);
    if (!weight.defined()) return x;
    if (path.fused) return rms_norm(x, weight, eps, /*fused=*/true, style);  // keeps x and rstd
    return path.selective ? checkpointed_rms_norm(x, weight, eps, style)
                          : rms_norm(x, weight, eps, false, style);
  }
};

}  // namespace

at::Tensor decoder_layer(const ModelConfig& cfg, const LayerWeights& w, const at::Tensor& x,
                         const TokenLayout& all_layers, LayerPath path) {
  const TokenLayout& layout = w.local_rope && all_layers.local ? *all_layers.local : all_layers;
  const Family& fam = family(cfg.model_type);
  const LayerNorms norm{w, fam.norm_weight, cfg.rms_norm_eps, path};
  const int64_t B = x.size(0);
  const int64_t T = x.size(1);
  const int64_t D = cfg.head_dim();
  const int64_t nh = cfg.num_heads;
  const int64_t nkv = cfg.num_kv_heads;
  // Rotary and the residual adds are not recomputed: they keep nothing beyond the layout's cos
  // and sin, so a region around them would only keep q and k twice.
  auto h = norm(NormRole::kAttnIn, x);
  at::Tensor q, k, v;
  {
    auto proj = qkv_projections(cfg, w, h);  // dropped here: rotary's outputs replace q and k
    // q/k norms before RoPE: over the whole projection (OLMo 2) or, after the split, each head.
    const bool whole = fam.qk_norm == QkNorm::kWhole;
    if (whole) {
      proj[0] = norm(NormRole::kQ, proj[0]);
      proj[1] = norm(NormRole::kK, proj[1]);
    }
    q = proj[0].view({B, T, nh, D});
    k = proj[1].view({B, T, nkv, D});
    if (!whole) {
      q = norm(NormRole::kQ, q);
      k = norm(NormRole::kK, k);
    }
    q = q.transpose(1, 2);  // [B, nh, T, D]
    k = k.transpose(1, 2);  // [B, nkv, T, D]
    v = proj[2].view({B, T, nkv, D}).transpose(1, 2);
  }
  // The rotary kernel turns whole heads: a partial rotary takes the composite path.
  const bool kernel = path.fused && fused_kernels_available(q) && cfg.rotary_dim() == D;
  if (kernel && layout.positions.defined()) {
    std::tie(q, k) = fused_rotary_at(q, k, layout.table_cos.to(x.scalar_type()),
                                     layout.table_sin.to(x.scalar_type()), layout.positions);
  } else {
    if (!layout.cos.defined())
      throw runtime::Error(
          "decoder_layer: a layout without cos/sin needs the rotary kernel (--fused-layers on "
          "CUDA)");
    const auto c = layout.cos.to(x.scalar_type());
    const auto s = layout.sin.to(x.scalar_type());
    if (kernel) {
      std::tie(q, k) = fused_rotary(q, k, c, s);
    } else {
      q = apply_rotary(q, c, s);
      k = apply_rotary(k, c, s);
    }
  }
  if (const double s = cfg.query_scale(); s != 1.0) q = q * s;  // query_pre_attn_scalar
  auto attn = layout.kv_cache
                  ? layout.kv_cache->attend(w.layer, q, k, v, w.window, cfg.attn_softcap)
                  : layout_attention(layout, q, k, v, w.window, cfg.attn_softcap);
  attn = attn.transpose(1, 2).reshape({B, T, nh * D});
  auto out = x + norm(NormRole::kAttnOut, w[Proj::kO](attn));
  auto m = norm(NormRole::kMlpIn, out);
  const at::Tensor mlp = w.moe ? moe_mlp(cfg, *w.moe, m, ExpertsPath::kAuto,
                                         all_layers.experts.get(), all_layers.router_aux.get())
                               : w[Proj::kDown](gated_mlp(cfg, w, m, path));
  return out + norm(NormRole::kMlpOut, mlp);
}

at::Tensor unit_forward(const ModelConfig& cfg, const UnitSpec& unit, const WeightLookup& w,
                        const at::Tensor& x, const TokenLayout& layout,
                        at::ScalarType compute_dtype, const LoraRun* lora, LayerPath path) {
  switch (unit.kind) {
    case UnitKind::kEmbedding: {
      // padding_idx: pad_token_id's row gets no gradient from the lookup, as in nn.Embedding.
      const at::Tensor e = at::embedding(w(names::kEmbed), x, cfg.pad_token_id).to(compute_dtype);
      if (!family(cfg.model_type).embed_scale) return e;
      // Gemma: times sqrt(hidden_size) as an fp32 scalar rounded to the compute dtype (on the
      // host).
      return e * at::scalar_tensor(std::sqrt(static_cast<double>(cfg.hidden_size)), at::kFloat)
                     .to(compute_dtype)
                     .item<double>();
    }
    case UnitKind::kDecoderLayer:
      return decoder_layer(
          cfg,
          LayerWeights::bind(cfg, w, unit.layer, lora, path.fused, path.fp8, layout.experts.get()),
          x, layout, path);
    case UnitKind::kHead:
      break;
  }
  return softcap_logits(cfg, at::linear(rms_norm(x, w(names::kNorm), cfg.rms_norm_eps, path.fused,
                                                 family(cfg.model_type).norm_weight),
                                        w(names::lm_head(cfg))));
}

at::Tensor softcap_logits(const ModelConfig& cfg, const at::Tensor& logits) {
  if (cfg.final_softcap <= 0) return logits;
  return at::tanh(logits / cfg.final_softcap) * cfg.final_softcap;
}

at::Tensor llama_forward(const ModelConfig& cfg, const WeightLookup& w, const at::Tensor& tokens,
                         const Rotary& rope, at::ScalarType compute_dtype, const LoraRun* lora,
                         const at::Tensor& positions, LayerPath path) {
  const TokenLayout layout =
      token_layout(rope, positions, tokens.size(1), tokens.device(), compute_dtype,
                   /*gather=*/true, /*varlen=*/cfg.attn_softcap <= 0);
  at::Tensor x = tokens;
  for (const UnitSpec& u : model_units(cfg))
    x = unit_forward(cfg, u, w, x, layout, compute_dtype, lora, path);
  return x;
}

LossSum causal_lm_loss(const at::Tensor& logits, const at::Tensor& labels, bool count,
                       bool aligned) {
  const int64_t T = logits.size(1), V = logits.size(2);
  const int64_t shift = aligned ? 0 : 1;
  auto lg = logits.narrow(1, 0, T - shift).to(at::kFloat).reshape({-1, V});
  auto lb = labels.narrow(1, shift, T - shift).reshape({-1});
  LossSum r;
  r.sum = at::cross_entropy_loss(lg, lb, {}, at::Reduction::Sum, /*ignore_index=*/-100);
  if (count) r.count = count_loss_tokens(labels, aligned);
  return r;
}

int64_t count_loss_tokens(const at::Tensor& labels, bool aligned) {
  const int64_t shift = aligned ? 0 : 1;
  return labels.narrow(1, shift, labels.size(1) - shift).ne(-100).sum().item<int64_t>();
}

}  // namespace shardtrain::model
