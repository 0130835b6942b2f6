#include "shardtrain/model/lm_loss.h"

#include <torch/autograd.h>

namespace shardtrain::model {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// The loss is the graph's end, so its gradients are computed with it, chunk by chunk, for the
// gradient `hint` backward is expected to bring (Liger-Kernel's fused linear cross-entropy):
// no logits are recomputed, and backward only rescales when the gradient differs.
struct ChunkedLmLoss : public torch::autograd::Function<ChunkedLmLoss> {
  // h [N, H], w [V, H], y [N] (-100: no loss).
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& h, const at::Tensor& w,
                            const at::Tensor& y, int64_t chunk, double hint) {
    const int64_t n = h.size(0);
    const bool want_dh = h.requires_grad(),
               want_dw = w.requires_grad();  // a frozen base's head has none
    auto total = at::zeros({}, h.options().dtype(at::kFloat));
    at::Tensor dh = want_dh ? at::empty_like(h) : at::Tensor();
    // The weight's gradient sums over every chunk: in fp32, as one unchunked GEMM accumulates.
    at::Tensor dw = want_dw ? at::zeros(w.sizes(), w.options().dtype(at::kFloat)) : at::Tensor();
    for (int64_t r = 0; r < n; r += chunk) {
      const int64_t m = std::min(chunk, n - r);
      const auto hc = h.narrow(0, r, m), yc = y.narrow(0, r, m);
      auto logits = head_logits(hc, w);             // [m, V] fp32
      const auto lse = at::logsumexp(logits, {1});  // [m]
      const auto valid = yc.ne(-100), target = yc.clamp_min(0).unsqueeze(1);
      total +=
          at::where(valid, lse - logits.gather(1, target).squeeze(1), at::zeros_like(lse)).sum();
      if (!want_dh && !want_dw) continue;
      auto& p = logits.sub_(lse.unsqueeze(1)).exp_();  // softmax, in place of the logits
      p.scatter_add_(1, target, at::full({m, 1}, -1.0, p.options()));
      p.mul_((valid.to(at::kFloat) * hint).unsqueeze(1));  // d (hint * loss) / d logits
      const auto dl = p.to(h.scalar_type());
      if (want_dh) {
        auto rows = dh.narrow(0, r, m);
        at::mm_out(rows, dl, w);
      }
      if (want_dw) add_head_weight_grad(dw, dl, hc);
    }
    ctx->saved_data["hint"] = hint;
    ctx->saved_data["dh"] = dh;
    ctx->saved_data["dw"] = want_dw ? dw.to(w.scalar_type()) : dw;
    return total;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grad_out) {
    const double hint = ctx->saved_data["hint"].toDouble();
    at::Tensor dh = ctx->saved_data["dh"].toTensor(), dw = ctx->saved_data["dw"].toTensor();
    ctx->saved_data.clear();  // this step's gradients leave with this call
    // On the device, without a host read: exactly 1 when the gradient is the hint.
    const at::Tensor rescale = grad_out[0].to(at::kFloat).div(hint);
    if (dh.defined()) dh.mul_(rescale.to(dh.scalar_type()));
    if (dw.defined()) dw.mul_(rescale.to(dw.scalar_type()));
    return {dh, dw, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// Labels aligned with the hidden states: position t holds labels[t+1]; the last holds -100.
at::Tensor next_token_labels(const at::Tensor& labels) {
  return at::cat({labels.narrow(1, 1, labels.size(1) - 1),
                  at::full({labels.size(0), 1}, -100, labels.options())},
                 1);
}

}  // namespace

at::Tensor head_logits(const at::Tensor& hc, const at::Tensor& w) {
  const bool fp32_out = hc.is_cuda() && hc.scalar_type() != at::kFloat;
  return fp32_out ? at::mm(hc, w.t(), at::kFloat) : at::mm(hc, w.t()).to(at::kFloat);
}

void add_head_weight_grad(at::Tensor& dw, const at::Tensor& dl, const at::Tensor& hc) {
  if (dl.scalar_type() == at::kFloat && hc.scalar_type() == at::kFloat)
    dw.addmm_(dl.t(), hc);
  else if (dl.is_cuda())
    at::addmm_out(dw, dw, dl.t(), hc, at::kFloat);
  else
    dw.addmm_(dl.t().to(at::kFloat), hc.to(at::kFloat));
}

int64_t loss_chunk_tokens(int64_t tokens, int64_t vocab, int64_t hidden, int64_t requested) {
  if (requested < 0 || tokens <= 0) return 0;
  if (requested > 0) return std::min(requested, tokens);
  const int64_t factor = (vocab + hidden - 1) / hidden, want = (tokens + factor - 1) / factor;
  int64_t chunk =
      256;  // below this the chunks' GEMMs get slow (measured on CPU: docs/performance.md)
  while (chunk < want) chunk *= 2;
  return std::min(chunk, tokens);
}

at::Tensor chunked_lm_loss(const at::Tensor& hidden, const at::Tensor& weight,
                           const at::Tensor& labels, int64_t chunk_tokens, double grad_hint,
                           bool aligned) {
  const int64_t H = hidden.size(-1);
  return ChunkedLmLoss::apply(hidden.reshape({-1, H}), weight,
                              (aligned ? labels : next_token_labels(labels)).reshape({-1}),
                              std::max<int64_t>(1, chunk_tokens), grad_hint);
}

}  // namespace shardtrain::model
