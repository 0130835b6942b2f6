#include "shardtrain/spec/train_spec.h"

#include "shardtrain/model/fp8.h"
#include "shardtrain/runtime/error.h"

namespace shardtrain::spec {

void check_objective(bool dpo, const std::string& reference_logps) {
  if (!dpo && !reference_logps.empty())
    throw runtime::UsageError("--reference-logps needs --objective dpo");
}

void validate(const TrainSpec& s, const model::ModelConfig& model, bool packed) {
  if (s.run.fp8 != model::Fp8Mode::kOff) {
    const std::string opt = std::string("--fp8 ") + model::fp8_mode_name(s.run.fp8) + ": ";
    if (const std::string p = model::fp8_shape_problem(model); !p.empty())
      throw runtime::UsageError(opt + p + "; or run without --fp8");
    if (s.run.fp8 == model::Fp8Mode::kRowwise && s.sharding.param_dtype == at::kFloat)
      throw runtime::UsageError(
          opt + "rowwise float8 GEMMs write bf16 only; use --param-dtype bf16 (or auto)");
  }
  if (s.sharding.no_sync_accumulation && s.grad_accum < 2)
    throw runtime::UsageError("--no-sync-accumulation needs --grad-accum 2 or more");
  check_objective(s.dpo, s.reference_logps);
  if (s.dpo && packed)
    throw runtime::UsageError(
        "--objective dpo with --packed: preference pairs are one row each (prepare --format "
        "preference refuses --mode packing); plan unpacked rows");
}

}  // namespace shardtrain::spec
