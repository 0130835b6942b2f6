#include "shardtrain/train/nonfinite.h"

#include <ATen/ATen.h>

#include <cmath>
#include <cstdio>

namespace shardtrain::train {

std::string format_rows(const std::vector<int64_t>& rows, size_t limit) {
  std::string s = "[";
  for (size_t i = 0; i < rows.size() && i < limit; ++i)
    s += (i ? ", " : "") + std::to_string(rows[i]);
  if (rows.size() > limit) s += ", ... (" + std::to_string(rows.size()) + " rows)";
  return s + "]";
}

NonfiniteVerdict NonfiniteGuard::check(int64_t step, double loss, double grad_norm,
                                       const std::vector<int64_t>& rows) {
  NonfiniteVerdict v;
  if (std::isfinite(loss) && std::isfinite(grad_norm)) {
    in_a_row_ = 0;
    return v;
  }
  v.finite = false;
  char figures[96];
  std::snprintf(figures, sizeof figures, "loss %g, gradient norm %g", loss, grad_norm);
  const std::string what = "step " + std::to_string(step) + ": non-finite " + figures +
                           " on the batch of rows " + format_rows(rows) + " of " + data_path_;
  if (!cfg_.skip) {
    v.stop = true;
    v.message = what +
                "; stopped before the optimizer step (--on-nonfinite stop). Lower --lr, "
                "check those rows, or pass --on-nonfinite skip";
    last_message_ = v.message;
    return v;
  }
  ++skipped_;
  ++in_a_row_;
  v.stop = in_a_row_ >= cfg_.max_in_a_row;
  v.message = what + "; " +
              (v.stop ? "stopped: " + std::to_string(in_a_row_) +
                            " non-finite steps in a row (--max-nonfinite-steps " +
                            std::to_string(cfg_.max_in_a_row) + "). Lower --lr or check the data"
                      : "skipped the optimizer step (" + std::to_string(in_a_row_) + " in a row, " +
                            std::to_string(skipped_) + " in this run)");
  last_message_ = v.message;
  return v;
}

at::Tensor NonfiniteGuard::skip_on_device(const at::Tensor& loss, const at::Tensor& grad_norm) {
  const auto opts = grad_norm.options().dtype(at::kFloat);
  if (!stopped_t_.defined()) {
    in_a_row_t_ = at::zeros({}, opts);
    stopped_t_ = at::zeros({}, opts);
  }
  const at::Tensor bad = loss.to(grad_norm.device())
                             .isfinite()
                             .logical_and(grad_norm.isfinite())
                             .logical_not()
                             .to(at::kFloat);
  if (!cfg_.skip) {
    stopped_t_ = at::maximum(stopped_t_, bad);  // --on-nonfinite stop: at the first
  } else {
    in_a_row_t_ = (in_a_row_t_ + 1) * bad;
    stopped_t_ = at::maximum(stopped_t_,
                             in_a_row_t_.ge(static_cast<double>(cfg_.max_in_a_row)).to(at::kFloat));
  }
  return at::maximum(bad, stopped_t_);
}

}  // namespace shardtrain::train
