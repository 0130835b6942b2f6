#include "shardtrain/model/preference_loss.h"

#include <ATen/ATen.h>

#include "shardtrain/runtime/error.h"

namespace shardtrain::model {

PreferenceTerms preference_loss(const at::Tensor& policy, const at::Tensor& reference,
                                const at::Tensor& tokens, const PreferenceConfig& cfg) {
  if (policy.numel() % 2 != 0)
    throw runtime::Error("preference_loss: rows come in pairs, got " +
                         std::to_string(policy.numel()));
  const at::Tensor pol = policy.to(at::kFloat).view({-1, 2});
  const at::Tensor ref = reference.to(pol.device(), at::kFloat).view({-1, 2});
  const at::Tensor ratio = pol - ref;  // [P, 2]: chosen, rejected log-ratios
  const at::Tensor chosen = ratio.select(1, 0);
  const at::Tensor rejected = ratio.select(1, 1);
  PreferenceTerms t;
  if (cfg.loss == PreferenceLossType::kSigmoid) {
    t.losses = -at::log_sigmoid(cfg.beta * (chosen - rejected));
  } else {  // TRL's IPO: the log-ratios averaged over each answer's tokens
    const at::Tensor n = tokens.to(pol.device(), at::kFloat).view({-1, 2}).clamp_min(1.0);
    const at::Tensor delta = chosen / n.select(1, 0) - rejected / n.select(1, 1);
    t.losses = (delta - 1.0 / (2.0 * cfg.beta)).pow(2);
  }
  const at::Tensor rc = (cfg.beta * chosen).detach().to(at::kDouble);
  const at::Tensor rr = (cfg.beta * rejected).detach().to(at::kDouble);
  const at::Tensor lp = pol.detach().to(at::kDouble);
  t.stats = at::stack({at::full({}, static_cast<double>(pol.size(0)), rc.options()),
                       t.losses.detach().to(at::kDouble).sum(), rc.sum(), rr.sum(),
                       rc.gt(rr).to(at::kDouble).sum(), (rc - rr).sum(), lp.select(1, 0).sum(),
                       lp.select(1, 1).sum()});
  return t;
}

PreferenceMetrics preference_metrics(const at::Tensor& stats) {
  const at::Tensor s = stats.to(at::kCPU, at::kDouble).contiguous();
  const double* v = s.data_ptr<double>();
  PreferenceMetrics m;
  m.pairs = static_cast<int64_t>(v[0]);
  if (m.pairs == 0) return m;
  const double n = v[0];
  m.loss = v[1] / n;
  for (size_t k = 0; k < m.values.size(); ++k) m.values[k] = v[2 + k] / n;
  return m;
}

}  // namespace shardtrain::model
