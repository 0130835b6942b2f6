#include "shardtrain/model/row_logps.h"

#include "shardtrain/model/lm_loss.h"

#include <torch/autograd.h>

#include <algorithm>

namespace shardtrain::model {

at::Tensor row_logps(const at::Tensor& logits, const at::Tensor& labels, bool aligned) {
  const int64_t B = logits.size(0), T = logits.size(1), V = logits.size(2);
  const int64_t shift = aligned ? 0 : 1;
  const auto lg = logits.narrow(1, 0, T - shift).to(at::kFloat).reshape({-1, V});
  const auto lb = labels.narrow(1, shift, T - shift).reshape({-1});
  const at::Tensor nll =
      at::cross_entropy_loss(lg, lb, {}, at::Reduction::None, /*ignore_index=*/-100);
  return -nll.view({B, T - shift}).sum(1);
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// Each row's summed answer log-probability through lm_head, logits one chunk of tokens at a
// time. Unlike the SFT loss, a row's gradient depends on its pair's whole result, known only
// after the forward: backward recomputes each chunk's logits (one more head GEMM) for it.
struct ChunkedRowLogps : public torch::autograd::Function<ChunkedRowLogps> {
  // h [N, H], w [V, H], y [N] (-100: no loss), row [N]: each token's row among B.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& h, const at::Tensor& w,
                            const at::Tensor& y, const at::Tensor& row, int64_t rows,
                            int64_t chunk) {
    at::Tensor out = at::zeros({rows}, h.options().dtype(at::kFloat));
    for (int64_t r = 0; r < h.size(0); r += chunk) {
      const int64_t m = std::min(chunk, h.size(0) - r);
      const auto yc = y.narrow(0, r, m);
      const auto logits = head_logits(h.narrow(0, r, m), w);
      const auto valid = yc.ne(-100);
      const auto target = yc.clamp_min(0).unsqueeze(1);
      const auto lp = logits.gather(1, target).squeeze(1) - at::logsumexp(logits, {1});
      out.index_add_(0, row.narrow(0, r, m), at::where(valid, lp, at::zeros_like(lp)));
    }
    ctx->save_for_backward({h, w, y, row});
    ctx->saved_data["chunk"] = chunk;
    return out;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grad_out) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &h = saved[0], &w = saved[1], &y = saved[2], &row = saved[3];
    const int64_t chunk = ctx->saved_data["chunk"].toInt();
    const at::Tensor g = grad_out[0].to(at::kFloat);  // [B]: d loss / d each row's log-prob
    const bool want_dh = h.requires_grad(),
               want_dw = w.requires_grad();  // a frozen base's head has none
    at::Tensor dh = want_dh ? at::empty_like(h) : at::Tensor();
    at::Tensor dw = want_dw ? at::zeros(w.sizes(), w.options().dtype(at::kFloat)) : at::Tensor();
    for (int64_t r = 0; r < h.size(0); r += chunk) {
      const int64_t m = std::min(chunk, h.size(0) - r);
      const auto hc = h.narrow(0, r, m);
      const auto yc = y.narrow(0, r, m);
      auto p = head_logits(hc, w);
      p = p.sub_(at::logsumexp(p, {1}, true)).exp_();  // softmax
      // d log p[target] / d logits = onehot - softmax, weighted by the token's row gradient.
      p.neg_().scatter_add_(1, yc.clamp_min(0).unsqueeze(1), at::ones({m, 1}, p.options()));
      p.mul_((yc.ne(-100).to(at::kFloat) * g.index_select(0, row.narrow(0, r, m))).unsqueeze(1));
      const auto dl = p.to(h.scalar_type());
      if (want_dh) {
        auto rows = dh.narrow(0, r, m);
        at::mm_out(rows, dl, w);
      }
      if (want_dw) add_head_weight_grad(dw, dl, hc);
    }
    return {dh,           want_dw ? dw.to(w.scalar_type()) : dw,
            at::Tensor(), at::Tensor(),
            at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor chunked_row_logps(const at::Tensor& hidden, const at::Tensor& weight,
                             const at::Tensor& labels, int64_t chunk_tokens, bool aligned) {
  const int64_t B = hidden.size(0), T = hidden.size(1), H = hidden.size(2);
  // Position t's target: labels[t + 1] (Hugging Face's shift), the last position none.
  const at::Tensor y =
      aligned ? labels
              : at::cat({labels.narrow(1, 1, T - 1), at::full({B, 1}, -100, labels.options())}, 1);
  const at::Tensor row =
      at::arange(B, labels.options().dtype(at::kLong)).unsqueeze(1).expand({B, T}).reshape({-1});
  return ChunkedRowLogps::apply(hidden.reshape({-1, H}), weight, y.reshape({-1}), row, B,
                                std::max<int64_t>(1, chunk_tokens));
}

at::Tensor row_answer_tokens(const at::Tensor& labels, bool aligned) {
  const int64_t shift = aligned ? 0 : 1;
  return labels.narrow(1, shift, labels.size(1) - shift).ne(-100).sum(1);
}

}  // namespace shardtrain::model
