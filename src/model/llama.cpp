#include "shardtrain/model/llama.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <tuple>

#include "shardtrain/model/checkpointed.h"
#include "shardtrain/model/fused_ops.h"
#include "shardtrain/runtime/error.h"

namespace shardtrain::model {

at::Tensor apply_rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  // x: [B, heads, T, D]; cos/sin: [T, D]. rotate_half(x) = cat(-x2, x1).
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
                                const LoraRun* lora, bool merge, Fp8Mode fp8) {
  LayerWeights lw;
  lw.window = cfg.attention_window(layer);
  for (Proj p : kProjections) {
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
    if (!merge) break;
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
  lw.input_norm = w(names::layer(layer, names::kInputNorm));
  lw.post_norm = w(names::layer(layer, names::kPostNorm));
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

at::Tensor layer_norm(const at::Tensor& x, const at::Tensor& weight, double eps, LayerPath path) {
  if (path.fused) return rms_norm(x, weight, eps, /*fused=*/true);  // keeps its input and rstd only
  return path.selective ? checkpointed_rms_norm(x, weight, eps) : rms_norm(x, weight, eps);
}

}  // namespace

at::Tensor decoder_layer(const ModelConfig& cfg, const LayerWeights& w, const at::Tensor& x,
                         const TokenLayout& layout, LayerPath path) {
  const int64_t B = x.size(0);
  const int64_t T = x.size(1);
  const int64_t D = cfg.head_dim();
  const int64_t nh = cfg.num_heads;
  const int64_t nkv = cfg.num_kv_heads;
  const double eps = cfg.rms_norm_eps;
  // Rotary and the residual adds are not recomputed: they keep nothing beyond the layout's cos
  // and sin, so a region around them would only keep q and k twice.
  auto h = layer_norm(x, w.input_norm, eps, path);
  at::Tensor q, k, v;
  {
    auto proj = qkv_projections(cfg, w, h);  // dropped here: rotary's outputs replace q and k
    q = proj[0].view({B, T, nh, D}).transpose(1, 2);   // [B, nh, T, D]
    k = proj[1].view({B, T, nkv, D}).transpose(1, 2);  // [B, nkv, T, D]
    v = proj[2].view({B, T, nkv, D}).transpose(1, 2);
  }
  const bool kernel = path.fused && fused_kernels_available(q);
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
  auto attn = layout_attention(layout, q, k, v, w.window);
  attn = attn.transpose(1, 2).reshape({B, T, nh * D});
  auto out = x + w[Proj::kO](attn);
  auto m = layer_norm(out, w.post_norm, eps, path);
  return out + w[Proj::kDown](gated_mlp(cfg, w, m, path));
}

at::Tensor unit_forward(const ModelConfig& cfg, const UnitSpec& unit, const WeightLookup& w,
                        const at::Tensor& x, const TokenLayout& layout,
                        at::ScalarType compute_dtype, const LoraRun* lora, LayerPath path) {
  switch (unit.kind) {
    case UnitKind::kEmbedding:
      return at::embedding(w(names::kEmbed), x).to(compute_dtype);
    case UnitKind::kDecoderLayer:
      return decoder_layer(cfg, LayerWeights::bind(cfg, w, unit.layer, lora, path.fused, path.fp8),
                           x, layout, path);
    case UnitKind::kHead:
      break;
  }
  return at::linear(rms_norm(x, w(names::kNorm), cfg.rms_norm_eps, path.fused),
                    w(names::lm_head(cfg)));
}

at::Tensor llama_forward(const ModelConfig& cfg, const WeightLookup& w, const at::Tensor& tokens,
                         const Rotary& rope, at::ScalarType compute_dtype, const LoraRun* lora,
                         const at::Tensor& positions, LayerPath path) {
  const TokenLayout layout =
      token_layout(rope, positions, tokens.size(1), tokens.device(), compute_dtype);
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
