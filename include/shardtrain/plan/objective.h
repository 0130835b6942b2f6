// `plan --objective dpo`: what direct preference optimisation (train --objective dpo) costs beside
// SFT on one rank: two rows per pair, its head's weight gradient and recomputed logits, and the
// reference model (a frozen sharded copy of the starting weights, an adapter run's base with the
// adapters off, or nothing with --reference-logps) with its forward per micro-batch.
// docs/planner.md, "DPO".
#pragma once
#include <cstdint>

#include "shardtrain/fsdp/memory_model.h"

namespace shardtrain::plan {

struct Objective {
  bool dpo = false;              // --objective dpo (else sft)
  bool reference_logps = false;  // --reference-logps: precomputed, no reference model in memory
};

enum class ReferenceModel {
  kNone,        // SFT, or DPO with --reference-logps
  kBase,        // DPO with adapters: the base with the adapters switched off (no second copy)
  kFrozenCopy,  // DPO, full fine-tuning: a second engine holding the starting weights' shards
};
ReferenceModel reference_model(const Objective& o, bool frozen_base);

// Rows per rank (per context group) per micro-batch: --batch-size, pairs under DPO (2 rows each).
int64_t micro_batch_rows(const Objective& o, int64_t batch_size);

// DPO's head runs fused like SFT's (--loss-chunk; off: unfused, the same terms as SFT's) but
// through model::chunked_row_logps, whose backward recomputes each chunk's logits (one more head
// forward) and adds each chunk's [V, H] weight-gradient product to the fp32 accumulator through a
// temporary fp32 copy of it (4 bytes x V x H more than SFT's fused head, when the head trains).
bool head_recomputes_logits(const Objective& o, int64_t loss_chunk);
model::ActivationBytes with_objective(model::ActivationBytes a, const Objective& o,
                                      int64_t loss_chunk);

// The reference model on one rank, folded into the policy's step peak.
struct ReferenceMemory {
  // The frozen copy's persistent bytes (its fp32 parameter shards and no-sync buffers: no
  // optimizer state and no gradients, it never runs backward): on the device, and with
  // --cpu-offload on the host (its master, mirror and the gradient shard offload allocates).
  int64_t device = 0, host = 0;
  // The tensors at the peak of its forward without autograd, before the step's training passes.
  int64_t forward_peak = 0;
};
// peak: the policy's step (fsdp::step_peak); gains the copy's device bytes, and becomes the
// reference forward's moment (gathers, logits; no gradient shard, no activation kept) where that
// is higher. cfg: the policy's (the copy is built with the same ShardingConfig).
ReferenceMemory add_reference(ReferenceModel ref, const fsdp::TrainingSizes& sizes,
                              const fsdp::ShardingConfig& cfg, const fsdp::StepShape& shape,
                              const model::ActivationBytes& act, fsdp::StepPeak& peak);

}  // namespace shardtrain::plan
