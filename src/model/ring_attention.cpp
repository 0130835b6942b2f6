#include "shardtrain/model/ring_attention.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <tuple>
#include <vector>

#include "shardtrain/model/masked_block.h"
#include "shardtrain/runtime/error.h"

namespace shardtrain::model {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// The path a block takes: the one asked for, or the device's best. A mask needs a path that
// reads it.
BlockPath choose(BlockPath path, const at::Tensor& q, const at::Tensor& mask, double softcap) {
  if (softcap > 0) return BlockPath::kMath;  // no kernel soft-caps the scores
  if (path == BlockPath::kAuto)
    return block_path(q.is_cuda(), q.scalar_type(), mask.defined(), q.size(-1));
  if (path != BlockPath::kMath && (!q.is_cuda() || (path == BlockPath::kFlash && mask.defined())))
    throw runtime::Error("block_attention: that kernel does not take this block");
  return path;
}

// [B, nkv, L, D] -> [B, nh, L, D]: kv head h / rep serves query head h (transformers' repeat_kv).
at::Tensor repeat_kv(const at::Tensor& x, int64_t rep) {
  return rep == 1 ? x : x.repeat_interleave(rep, 1);
}

// [B, nh, L, D] fp32 -> [B, nkv, L, D]: the query heads' gradients summed onto their kv head.
at::Tensor sum_kv(const at::Tensor& g, int64_t nkv) {
  const int64_t rep = g.size(1) / nkv;
  if (rep == 1) return g;
  return g.view({g.size(0), nkv, rep, g.size(2), g.size(3)}).sum(2);
}

// Scaled scores with masked keys at -inf: [B, nh, Lq, Lk] fp32. kr: the repeated keys, fp32.
// softcap > 0: cap * tanh(s / cap), and *capped gets tanh(s / cap) for backward's chain rule.
at::Tensor scores(const at::Tensor& q, const at::Tensor& kr, const at::Tensor& mask,
                  double softcap = 0, at::Tensor* capped = nullptr) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  at::Tensor s = at::matmul(q.to(at::kFloat), kr.transpose(-2, -1)).mul_(scale);
  if (softcap > 0) {
    s = s.div_(softcap).tanh_();
    if (capped) *capped = s.clone();
    s.mul_(softcap);
  }
  if (mask.defined()) s.masked_fill_(mask.logical_not(), kNegInf);
  return s;
}

at::Tensor finite_or_zero(const at::Tensor& lse) { return lse.masked_fill(lse.isneginf(), 0.0); }

// The math path takes a block's query rows a span at a time (math_span_rows), so its fp32 scores
// (and their softmax and gradient) stay bounded whatever the block's size.
struct RowSpan {
  int64_t first = 0, rows = 0;
};
std::vector<RowSpan> row_spans(const at::Tensor& q, const at::Tensor& k) {
  const int64_t step = math_span_rows(q.size(0), q.size(1), k.size(2), q.is_cuda());
  std::vector<RowSpan> out;
  for (int64_t first = 0; first < q.size(2); first += step)
    out.push_back({first, std::min(step, q.size(2) - first)});
  return out;
}

// The mask for a span of query rows: the block's rows of `mask`, and causality (key j for query
// i >= j on the block's diagonal) at the span's offset.
at::Tensor rows_of(const at::Tensor& mask, bool causal, const RowSpan& r, const at::Tensor& k) {
  at::Tensor m = mask.defined() ? mask.narrow(2, r.first, r.rows) : at::Tensor();
  if (!causal) return m;
  const auto opts = k.options().dtype(at::kLong);
  const at::Tensor qi = at::arange(r.first, r.first + r.rows, opts).unsqueeze(1);
  const at::Tensor tri = qi.ge(at::arange(k.size(2), opts).unsqueeze(0));  // [rows, Lk]
  return m.defined() ? m.logical_and(tri) : tri;
}

// The query rows and key rows of rank r's block against rank s's K/V under the zigzag layout:
// chunk r and 2N-1-r against chunks s and 2N-1-s; the other half of each off-diagonal block is
// masked by causality, so it is never computed.
struct Sel {
  int64_t q0 = 0, ql = 0, k0 = 0, kl = 0;
  bool causal = false;
};
Sel select_block(int r, int s, int64_t c) {
  if (s == r) return {0, 2 * c, 0, 2 * c, true};
  if (s < r)
    return {0, 2 * c, 0, c, false};  // both query chunks see all of chunk s, none of 2N-1-s
  return {c, c, 0, 2 * c, false};    // only chunk 2N-1-r sees rank s's chunks
}

// The mask beyond causality (sliding window, documents) for a block, as [B or 1, 1, ql, kl] bool;
// undefined where none applies. skip: no query of the block sees any of its keys.
at::Tensor block_mask(const ContextLayout& cl, int r, int s, const Sel& sel, int64_t window,
                      bool* skip) {
  const int n = cl.ring.size;
  const ZigzagChunks zr = zigzag_chunks(cl.full_len, n, r), zs = zigzag_chunks(cl.full_len, n, s);
  const bool band = window > 0 && window < cl.full_len;
  const int64_t first_q = sel.q0 == 0 ? zr.first : zr.second;
  const int64_t last_k = sel.kl == 2 * zs.len ? zs.second + zs.len - 1 : zs.first + zs.len - 1;
  *skip = band && first_q - last_k >= window;
  if (*skip || (!band && !cl.doc.defined())) return at::Tensor();
  const at::Tensor qg = cl.places[r].narrow(0, sel.q0, sel.ql);
  const at::Tensor kg = cl.places[s].narrow(0, sel.k0, sel.kl);
  const at::Tensor back = qg.unsqueeze(1) - kg.unsqueeze(0);  // [ql, kl]: query minus key
  at::Tensor m = back.ge(0);
  if (band) m = m.logical_and(back.lt(window));
  m = m.unsqueeze(0).unsqueeze(0);  // [1, 1, ql, kl]
  if (cl.doc.defined()) {
    const at::Tensor dq = cl.doc.index_select(1, qg), dk = cl.doc.index_select(1, kg);
    m = m.logical_and(dq.unsqueeze(2).eq(dk.unsqueeze(1)).unsqueeze(1));  // [B, 1, ql, kl]
  }
  return m;
}

at::Tensor pack(const at::Tensor& k, const at::Tensor& v) {
  return at::cat({k.reshape({-1}), v.reshape({-1})});
}
std::pair<at::Tensor, at::Tensor> unpack(const at::Tensor& kv, at::IntArrayRef shape) {
  const int64_t n = kv.numel() / 2;
  return {kv.narrow(0, 0, n).view(shape), kv.narrow(0, n, n).view(shape)};
}

std::pair<at::Tensor, at::Tensor> ring_forward(const ContextLayout& cl, const at::Tensor& q,
                                               const at::Tensor& k, const at::Tensor& v,
                                               int64_t window, double softcap) {
  const int n = cl.ring.size, r = cl.ring.rank;
  const int64_t c = q.size(2) / 2;
  at::Tensor acc = at::zeros(q.sizes(), q.options().dtype(at::kFloat));
  at::Tensor lse = at::full({q.size(0), q.size(1), q.size(2)}, kNegInf, acc.options());
  at::Tensor kv = pack(k, v);
  for (int i = 0; i < n; ++i) {
    const int s = (r - i + n) % n;
    at::Tensor next;
    std::function<void()> arrived;
    if (i + 1 < n) {  // the next rank's K/V travel while this block computes
      next = at::empty_like(kv);
      arrived = cl.ring.exchange(kv, next);
    }
    const auto [ks, vs] = unpack(kv, k.sizes());
    const Sel sel = select_block(r, s, c);
    bool skip = false;
    const at::Tensor mask = block_mask(cl, r, s, sel, window, &skip);
    if (!skip) {
      const BlockOut b = block_attention(q.narrow(2, sel.q0, sel.ql), ks.narrow(2, sel.k0, sel.kl),
                                         vs.narrow(2, sel.k0, sel.kl), mask, sel.causal,
                                         BlockPath::kAuto, softcap);
      at::Tensor o = acc.narrow(2, sel.q0, sel.ql);
      at::Tensor l = lse.narrow(2, sel.q0, sel.ql);
      merge_block(o, l, b);
    }
    if (arrived) {
      arrived();
      kv = next;
    }
  }
  return {acc.to(q.scalar_type()), lse};
}

std::array<at::Tensor, 3> ring_backward(const ContextLayout& cl, const at::Tensor& dout,
                                        const at::Tensor& q, const at::Tensor& k,
                                        const at::Tensor& v, const at::Tensor& out,
                                        const at::Tensor& lse, int64_t window, double softcap) {
  const int n = cl.ring.size, r = cl.ring.rank;
  const int64_t c = q.size(2) / 2;
  const at::Tensor dsum = (dout.to(at::kFloat) * out.to(at::kFloat)).sum(-1);  // [B, nh, L]
  at::Tensor dq = at::zeros(q.sizes(), q.options().dtype(at::kFloat));
  at::Tensor kv = pack(k, v);
  at::Tensor incoming;  // dK/dV of the K/V held now, from the ranks that held them before
  std::function<void()> dkv_arrived;
  for (int i = 0; i < n; ++i) {
    const int s = (r - i + n) % n;
    at::Tensor next;
    std::function<void()> kv_arrived;
    if (i + 1 < n) {
      next = at::empty_like(kv);
      kv_arrived = cl.ring.exchange(kv, next);
    }
    const auto [ks, vs] = unpack(kv, k.sizes());
    at::Tensor g = at::zeros({kv.numel()}, dq.options());
    auto [gk, gv] = unpack(g, k.sizes());
    const Sel sel = select_block(r, s, c);
    bool skip = false;
    const at::Tensor mask = block_mask(cl, r, s, sel, window, &skip);
    if (!skip) {
      const auto rows = [&sel](const at::Tensor& t) { return t.narrow(2, sel.q0, sel.ql); };
      const auto keys = [&sel](const at::Tensor& t) { return t.narrow(2, sel.k0, sel.kl); };
      const BlockGrads bg =
          block_attention_backward(rows(dout), rows(q), keys(ks), keys(vs), rows(out), rows(lse),
                                   rows(dsum), mask, sel.causal, BlockPath::kAuto, softcap);
      rows(dq).add_(bg.dq);
      keys(gk).add_(bg.dk);
      keys(gv).add_(bg.dv);
    }
    if (dkv_arrived) {  // this block's dK/dV computed while the accumulated ones travelled
      dkv_arrived();
      g.add_(incoming);
    }
    incoming = at::empty_like(g);
    dkv_arrived = cl.ring.exchange(g, incoming);  // on to the next holder; the last: the owner
    if (kv_arrived) {
      kv_arrived();
      kv = next;
    }
  }
  dkv_arrived();
  const auto [dk, dv] = unpack(incoming, k.sizes());
  return {dq.to(q.scalar_type()), dk.to(k.scalar_type()), dv.to(v.scalar_type())};
}

class RingAttention : public torch::autograd::Function<RingAttention> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& v, const ContextLayout* cl, int64_t window,
                            double softcap) {
    auto [out, lse] = ring_forward(*cl, q, k, v, window, softcap);
    ctx->save_for_backward({q, k, v, out, lse});
    // The layout outlives the pass's backward (the engine's Pass holds it), so a pointer serves.
    ctx->saved_data["layout"] = reinterpret_cast<int64_t>(cl);
    ctx->saved_data["window"] = window;
    ctx->saved_data["softcap"] = softcap;
    return out;
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grad_out) {
    const auto saved = ctx->get_saved_variables();
    const auto* cl = reinterpret_cast<const ContextLayout*>(ctx->saved_data["layout"].toInt());
    const auto g =
        ring_backward(*cl, grad_out[0], saved[0], saved[1], saved[2], saved[3], saved[4],
                      ctx->saved_data["window"].toInt(), ctx->saved_data["softcap"].toDouble());
    return {g[0], g[1], g[2], at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

BlockOut block_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const at::Tensor& mask, bool causal, BlockPath path, double softcap) {
  path = choose(path, q, mask, softcap);
  if (path == BlockPath::kMasked)
    return masked_block_attention(q, k, v,
                                  block_keys(mask, causal, q.size(2), k.size(2), q.device()));
  if (path == BlockPath::kFlash) {
    const auto t = [](const at::Tensor& x) { return x.transpose(1, 2).contiguous(); };
    auto res = at::_flash_attention_forward(t(q), t(k), t(v), std::nullopt, std::nullopt, q.size(2),
                                            k.size(2), 0.0, causal,
                                            /*return_debug_mask=*/false);
    return {std::get<0>(res).transpose(1, 2).to(at::kFloat), std::get<1>(res)};
  }
  const int64_t rep = q.size(1) / k.size(1);  // the casts once a block, not once a span
  const at::Tensor kr = repeat_kv(k, rep).to(at::kFloat), vr = repeat_kv(v, rep).to(at::kFloat);
  BlockOut b;
  b.out = at::empty(q.sizes(), q.options().dtype(at::kFloat));
  b.lse = at::empty({q.size(0), q.size(1), q.size(2)}, b.out.options());
  for (const RowSpan r : row_spans(q, k)) {
    const at::Tensor s =
        scores(q.narrow(2, r.first, r.rows), kr, rows_of(mask, causal, r, k), softcap);
    at::Tensor lse = b.lse.narrow(2, r.first, r.rows);
    lse.copy_(at::logsumexp(s, -1));
    const at::Tensor p = (s - finite_or_zero(lse).unsqueeze(-1)).exp_();
    b.out.narrow(2, r.first, r.rows).copy_(at::matmul(p, vr));
  }
  return b;
}

BlockGrads block_attention_backward(const at::Tensor& dout, const at::Tensor& q,
                                    const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
                                    const at::Tensor& lse, const at::Tensor& dsum,
                                    const at::Tensor& mask, bool causal, BlockPath path,
                                    double softcap) {
  path = choose(path, q, mask, softcap);
  if (path == BlockPath::kMasked)
    return masked_block_attention_backward(
        dout, q, k, v, out, lse, block_keys(mask, causal, q.size(2), k.size(2), q.device()));
  if (path == BlockPath::kFlash) {
    const auto t = [](const at::Tensor& x) { return x.transpose(1, 2).contiguous(); };
    const at::Tensor none = at::empty({0}, q.options().dtype(at::kLong));  // no dropout: no rng
    auto g = at::_flash_attention_backward(t(dout), t(q), t(k), t(v), t(out), lse.contiguous(),
                                           at::Tensor(), at::Tensor(), q.size(2), k.size(2), 0.0,
                                           causal, none, none);
    const auto back = [](const at::Tensor& x) { return x.transpose(1, 2).to(at::kFloat); };
    return {back(std::get<0>(g)), back(std::get<1>(g)), back(std::get<2>(g))};
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  const int64_t nkv = k.size(1), rep = q.size(1) / nkv;
  const at::Tensor kr = repeat_kv(k, rep).to(at::kFloat), vr = repeat_kv(v, rep).to(at::kFloat);
  BlockGrads g;
  g.dq = at::empty(q.sizes(), q.options().dtype(at::kFloat));
  at::Tensor dk = at::zeros(kr.sizes(), kr.options()), dv = at::zeros(vr.sizes(), vr.options());
  for (const RowSpan r : row_spans(q, k)) {
    const auto rows = [&r](const at::Tensor& x) { return x.narrow(2, r.first, r.rows); };
    const at::Tensor qf = rows(q).to(at::kFloat), dof = rows(dout).to(at::kFloat);
    at::Tensor capped;  // tanh(s / cap): d(capped score) / d(score) = 1 - tanh^2
    const at::Tensor p = (scores(rows(q), kr, rows_of(mask, causal, r, k), softcap, &capped) -
                          rows(lse).unsqueeze(-1))
                             .exp_();
    at::Tensor ds = p * (at::matmul(dof, vr.transpose(-2, -1)) - rows(dsum).unsqueeze(-1));
    if (softcap > 0) ds.mul_(1 - capped.square());
    rows(g.dq).copy_(at::matmul(ds, kr).mul_(scale));
    dk.add_(at::matmul(ds.transpose(-2, -1), qf).mul_(scale));
    dv.add_(at::matmul(p.transpose(-2, -1), dof));
  }
  g.dk = sum_kv(dk, nkv);
  g.dv = sum_kv(dv, nkv);
  return g;
}

void merge_block(at::Tensor& out, at::Tensor& lse, const BlockOut& b) {
  const at::Tensor merged = at::logaddexp(lse, b.lse);
  const at::Tensor base = finite_or_zero(merged);
  out.mul_((lse - base).exp_().unsqueeze(-1)).add_(b.out * (b.lse - base).exp_().unsqueeze(-1));
  lse.copy_(merged);
}

at::Tensor ring_attention(const ContextLayout& ctx, const at::Tensor& q, const at::Tensor& k,
                          const at::Tensor& v, int64_t window, double softcap) {
  if (q.size(2) % 2 != 0 || q.size(2) * ctx.ring.size != ctx.full_len)
    throw runtime::Error("ring_attention: " + std::to_string(q.size(2)) + " tokens on a rank of " +
                         std::to_string(ctx.ring.size) + " over rows of " +
                         std::to_string(ctx.full_len));
  return RingAttention::apply(q, k, v, &ctx, window, softcap);
}

}  // namespace shardtrain::model
