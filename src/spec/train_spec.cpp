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
  if (const int n = s.sharding.expert_parallel; n > 1) {
    const std::string opt = "--expert-parallel " + std::to_string(n) + ": ";
    if (!model.is_moe())
      throw runtime::UsageError(opt + model.model_type +
                                " has no experts; expert parallelism splits a mixture of experts");
    if (model.num_experts % n != 0)
      throw runtime::UsageError(opt + "must divide num_experts (" +
                                std::to_string(model.num_experts) + "); pick a divisor");
  }
  if (s.dpo && model.output_router_logits && model.is_moe())
    throw runtime::UsageError(
        "--objective dpo: the model's config.json sets output_router_logits (a load-balancing "
        "loss on top of DPO's is not built); set it to false for DPO");
  if (s.sharding.no_sync_accumulation && s.grad_accum < 2)
    throw runtime::UsageError("--no-sync-accumulation needs --grad-accum 2 or more");
  check_objective(s.dpo, s.reference_logps);
  if (s.dpo && packed)
    throw runtime::UsageError(
        "--objective dpo with --packed: preference pairs are one row each (prepare --format "
        "preference refuses --mode packing); plan unpacked rows");
}

}  // namespace shardtrain::spec
