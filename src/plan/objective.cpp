#include "shardtrain/plan/objective.h"

#include <algorithm>

#include "shardtrain/model/lm_loss.h"
#include "shardtrain/runtime/error.h"

namespace shardtrain::plan {

ReferenceModel reference_model(const Objective& o, bool frozen_base) {
  if (!o.dpo || o.reference_logps) return ReferenceModel::kNone;
  return frozen_base ? ReferenceModel::kBase : ReferenceModel::kFrozenCopy;
}

int64_t micro_batch_rows(const Objective& o, int64_t batch_size) {
  return o.dpo ? 2 * batch_size : batch_size;
}

bool head_recomputes_logits(const Objective& o, int64_t loss_chunk) {
  return o.dpo && loss_chunk >= 0;  // fsdp/engine.cpp: fused_head when the chunk is > 0
}

model::ActivationBytes with_objective(model::ActivationBytes a, const Objective& o,
                                      int64_t loss_chunk) {
  // model/preference_loss.cpp, ChunkedRowLogps::backward: dw.add_(mm(dl.t(), hc).to(kFloat)).
  // step_peak counts the accumulator and, in a 16-bit dtype, the product; this is the fp32 copy
  // (in fp32, the product itself, which SFT's addmm_ never makes).
  if (head_recomputes_logits(o, loss_chunk)) a.fused_fixed += 4 * a.vocab * a.hidden;
  return a;
}

ReferenceMemory add_reference(ReferenceModel ref, const fsdp::TrainingSizes& sizes,
                              const fsdp::ShardingConfig& cfg, const fsdp::StepShape& shape,
                              const model::ActivationBytes& act, fsdp::StepPeak& peak) {
  ReferenceMemory m;
  if (ref == ReferenceModel::kNone) return m;
  const int pe = shape.param_elt;
  if (ref == ReferenceModel::kFrozenCopy) {
    // A second engine with the same ShardingConfig (train/dpo_reference.cpp): the policy's units
    // sharded the same way, its fp32 master shards (offloaded: on the host beside their
    // compute-dtype mirror and the gradient shard offload allocates) and no-sync buffers; no
    // optimizer steps it.
    const fsdp::MemoryReport f =
        fsdp::persistent_bytes(sizes, cfg.no_sync_accumulation, pe, cfg.cpu_offload);
    int64_t shard = 0;
    for (const fsdp::UnitSize& u : sizes.trainable_units()) shard += u.shard_numel;
    m.device = f.param_bytes + f.no_sync_bytes + f.base_bytes;
    m.host = cfg.cpu_offload ? (fsdp::offloaded_bytes_per_element(pe) - 8) * shard : 0;
  }
  // At the training passes' peak the copy holds only its persistent bytes: its forward released
  // every unit it gathered.
  peak.total_bytes += m.device;
  // Its forward (FsdpEngine::row_logps): the unit computing and those gathered ahead (their shards
  // copied from the host when offloaded), a tied embedding with the head. Fused head: kept
  // gathered while chunked_row_logps makes a chunk's fp32 logits at a time from the normed hidden
  // states; unfused: the logits as the head makes them, then their fp32 copy and log-softmax with
  // every unit released.
  const int64_t tokens = shape.micro_batch_rows * shape.seq_len;
  const int64_t chunk = shape.head_chunk;
  const int64_t U = static_cast<int64_t>(sizes.base.size());
  const int ahead = cfg.prefetch ? cfg.max_inflight_gathers - 1 : 0;
  const auto gathered = [&](int64_t u) {
    return u < U ? fsdp::gathered_bytes(sizes.gathered_numel(u), pe) : int64_t{0};
  };
  int64_t g_peak = 0, rest_peak = chunk > 0 ? 0 : (pe + 8) * act.vocab * tokens;
  for (int64_t u = 0; u < U; ++u) {
    int64_t g = 0, rest = 0;
    for (int k = 0; k <= ahead && u + k < U; ++k) {
      g += gathered(u + k);
      if (k > 0 && cfg.cpu_offload && shape.shard_size > 1)
        rest += sizes.trainable(u + k).shard_numel * pe;
    }
    if (sizes.base[u].kind == model::UnitKind::kHead) {
      if (shape.tied_embedding) g += gathered(0);
      rest +=
          chunk > 0 ? chunk * act.fused_chunk + tokens * pe * act.hidden : pe * act.vocab * tokens;
    }
    if (g + rest > g_peak + rest_peak) {
      g_peak = g;
      rest_peak = rest;
    }
  }
  m.forward_peak = peak.persistent + m.device + g_peak + rest_peak;
  if (m.forward_peak > peak.total_bytes) {  // the step's peak is the reference's forward
    peak.total_bytes = m.forward_peak;
    peak.grad_shards = 0;
    peak.reductions = 0;
    peak.staging = 0;
    peak.gathered = g_peak;
    peak.activations = rest_peak;
  }
  return m;
}

}  // namespace shardtrain::plan
