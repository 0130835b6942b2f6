// One description of a training run, shared by `train` and `plan`: how it is sharded, what its
// units compute, its batch and its objective; their options declared once (spec_options.h) and
// their combinations checked once (validate). The mesh's sizes are checked where the mesh is
// built (comm::with_context, fsdp::group_layout).
#pragma once
#include <cstdint>
#include <string>

#include "shardtrain/fsdp/sharding.h"
#include "shardtrain/model/config.h"
#include "shardtrain/model/run_plan.h"

namespace shardtrain::spec {

struct TrainSpec {
  fsdp::ShardingConfig sharding;
  model::RunPlan run;
  int context_parallel = 1;  // the mesh's context dimension (comm::with_context)
  // Rows (DPO: pairs) per rank per micro-batch, and micro-batches per step. The commands keep
  // their own defaults: train's in train::TrainConfig, plan's in plan::PlanInput.
  int64_t batch_size = 1, grad_accum = 1;
  bool dpo = false;             // --objective dpo (else sft)
  std::string reference_logps;  // --reference-logps: the reference's log-probabilities file
};

// The compatibility matrix of a run's options, each refusal written once: --fp8 on a model whose
// projections it cannot multiply or with rowwise scales in fp32, --no-sync-accumulation without
// --grad-accum, --reference-logps without DPO, DPO on packed rows. Pure; throws UsageError naming
// the options.
void validate(const TrainSpec& s, const model::ModelConfig& model, bool packed);
// validate's objective part, which eval's options share: --reference-logps needs DPO.
void check_objective(bool dpo, const std::string& reference_logps);

}  // namespace shardtrain::spec
