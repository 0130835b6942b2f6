#include "shardtrain/train/step_readback.h"

#include <ATen/ATen.h>

namespace shardtrain::train {

std::vector<PendingStep> StepReadback::take() {
  std::vector<PendingStep> out;
  out.swap(pending_);
  if (out.empty()) return out;
  // Per step: loss, norm, and in a DPO run (every step's or none) its stats; the aux loss likewise.
  const bool dpo = out.front().preference.defined();
  const bool aux = out.front().aux.defined();
  const int64_t kAux = 2 + (dpo ? model::kNumPreferenceStats : 0);
  const int64_t kPer = kAux + (aux ? 1 : 0);
  std::vector<at::Tensor> figures;
  for (const PendingStep& s : out) {
    figures.push_back(s.loss.to(at::kDouble).reshape({1}));
    figures.push_back(s.grad_norm.to(s.loss.device(), at::kDouble).reshape({1}));
    if (dpo) figures.push_back(s.preference.to(s.loss.device(), at::kDouble));
    if (aux) figures.push_back(s.aux.to(s.loss.device(), at::kDouble).reshape({1}));
  }
  const at::Tensor host = at::cat(figures).to(at::kCPU);  // the one host read
  const double* v = host.data_ptr<double>();
  for (size_t i = 0; i < out.size(); ++i) {
    StepMetrics& m = out[i].m;
    m.loss = v[kPer * i];
    m.grad_norm = v[kPer * i + 1];
    if (aux) m.aux_loss = v[kPer * i + kAux];
    if (dpo)
      m.preference =
          model::preference_metrics(host.narrow(0, kPer * i + 2, model::kNumPreferenceStats));
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
