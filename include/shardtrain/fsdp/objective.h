// What the engine asks of a training objective: the loss of one micro-batch from the head's
// output, what the step's loss is a mean over, the statistics it reports, and what a forward-only
// pass yields. The engine runs the model and calls these without knowing which objective it is
// (train/sft_objective.h, train/logps_objective.h and the others beside them).
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "shardtrain/comm/parallel_dims.h"
#include "shardtrain/model/micro_batch.h"

namespace shardtrain::fsdp {

// This rank's micro-batches: each one's rows, split among the rank's context group (the training
// loop's, the validator's and eval's batch transform; the engine runs what it is given).
model::MicroBatch context_split(const model::Batch& rows, const comm::ParallelDims& groups);
std::vector<model::MicroBatch> context_split(const std::vector<model::Batch>& batches,
                                             const comm::ParallelDims& groups);

// The head's output for one micro-batch on this rank. Undefined `out`: the rank has no rows.
struct HeadOutput {
  at::Tensor out;          // logits [B, T, V]; under a fused head the final norm's output [B, T, H]
  at::Tensor head_weight;  // fused head: lm_head's weight, which the loss applies a chunk at a time
  int64_t chunk = 0;       // fused head: tokens whose logits live at once; 0: `out` is the logits
  at::Tensor labels;       // [B, T] on the device
  bool aligned = false;    // model::Batch::aligned_labels
  // The cross-entropy summed over the loss tokens (scalar, differentiable). grad_hint: the factor
  // the caller will scale it by before backward (the fused head's backward uses it).
  at::Tensor token_loss_sum(double grad_hint = 1.0) const;
  // Each row's summed answer log-probability over this rank's tokens, [B], differentiable.
  at::Tensor row_logps() const;
};

// Micro-batch i's contribution to a training step.
struct LossTerms {
  at::Tensor sum;       // differentiable; the engine backpropagates sum / the step's denominator
  at::Tensor reported;  // added to the step's reported loss sum; undefined: nothing from this rank
  at::Tensor stats;     // added to the step's statistics ([num_stats()]); undefined: nothing
};

class Objective {
 public:
  virtual ~Objective() = default;
  // Before a step's (or a forward-only pass's) forwards, with all its micro-batches: what must see
  // the model before it changes. Collective when it runs a model.
  virtual void before_forward(const std::vector<model::MicroBatch>& micro) { (void)micro; }
  // True: the step's loss is a mean over its loss tokens (the engine counts them anyway); false:
  // over units(), counted on the host for each micro-batch with rows on this rank.
  virtual bool per_token() const { return true; }
  virtual int64_t units(const model::MicroBatch& mb) const {
    (void)mb;
    return 0;
  }
  virtual LossTerms loss(const HeadOutput& head, const model::MicroBatch& mb, size_t index,
                         double inv_denominator) = 0;
  virtual int64_t num_stats() const { return 0; }  // the step's statistics, fp64, summed
  // Forward only: whether the head runs fused (training's follows the engine's loss chunking),
  // whether the trained adapters are off (the frozen base alone), and what the pass yields.
  virtual bool fused_head_in_eval() const { return false; }
  virtual bool base_only() const { return false; }
  virtual at::Tensor evaluate(const HeadOutput& head, const model::MicroBatch& mb) = 0;
};

}  // namespace shardtrain::fsdp
