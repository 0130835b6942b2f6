#include "shardtrain/train/step_readback.h"

#include <ATen/ATen.h>

namespace shardtrain::train {

std::vector<PendingStep> StepReadback::take() {
  std::vector<PendingStep> out;
  out.swap(pending_);
  if (out.empty()) return out;
  std::vector<at::Tensor> figures;  // [steps x 2]: loss, norm
  for (const PendingStep& s : out) {
    figures.push_back(s.loss.to(at::kDouble).reshape({}));
    figures.push_back(s.grad_norm.to(s.loss.device(), at::kDouble).reshape({}));
  }
  const at::Tensor host = at::stack(figures).to(at::kCPU);  // the one host read
  const double* v = host.data_ptr<double>();
  for (size_t i = 0; i < out.size(); ++i) {
    StepMetrics& m = out[i].m;
    m.loss = v[2 * i];
    m.grad_norm = v[2 * i + 1];
    const runtime::PhaseTimes fb = out[i].forward_backward->finish();
    const runtime::PhaseTimes opt = out[i].optimizer->finish();
    for (runtime::Phase p :
         {runtime::Phase::kForward, runtime::Phase::kBackward, runtime::Phase::kExposedComm})
      m.phases[p] += fb[p];
    m.phases[runtime::Phase::kOptimizer] += opt[runtime::Phase::kOptimizer];
    m.phases[runtime::Phase::kExposedComm] += opt[runtime::Phase::kExposedComm];
  }
  return out;
}

}  // namespace shardtrain::train
