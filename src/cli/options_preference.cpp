// train's and eval's --objective and DPO's settings (docs/dpo.md).
#include "option_parts.h"
#include "shardtrain/runtime/error.h"

namespace shardtrain::cli::parts {

po::options_description preference_desc(PreferenceOptions& p, PreferenceArgs& raw, bool with_val) {
  po::options_description d("Objective (DPO: preference pairs from 'prepare --format preference')");
  raw.loss = runtime::enum_name(model::kPreferenceLossNames, p.cfg.loss);
  spec::add_objective_options(d, raw.objective, p.reference_logps);
  d.add_options()("dpo-beta", real(&p.cfg.beta, p.cfg.beta),
                  "DPO's beta: how far the policy may move from the reference (TRL's default)")(
      "dpo-loss", po::value(&raw.loss)->default_value(raw.loss),
      "sigmoid (DPO) or ipo (IPO, log-ratios averaged over the answer's tokens)");
  if (with_val)
    d.add_options()("val-reference-logps", po::value(&p.val_reference_logps),
                    "the same for --val-data");
  return d;
}

void check_preference(PreferenceOptions& p, const PreferenceArgs& raw) {
  p.enabled = spec::resolve_objective(raw.objective);
  const auto loss = runtime::parse_enum(model::kPreferenceLossNames, raw.loss);
  if (!loss)
    throw runtime::UsageError("--dpo-loss must be " +
                              runtime::enum_choices(model::kPreferenceLossNames) + ", got '" +
                              raw.loss + "'");
  p.cfg.loss = *loss;
  if (!(p.cfg.beta > 0))
    throw runtime::UsageError("--dpo-beta must be positive; try 0.1 (TRL's default)");
  spec::check_objective(p.enabled, p.reference_logps);
  if (!p.enabled && !p.val_reference_logps.empty())
    throw runtime::UsageError("--val-reference-logps needs --objective dpo");
  require_file("--reference-logps", p.reference_logps);
  require_file("--val-reference-logps", p.val_reference_logps);
}

}  // namespace shardtrain::cli::parts
