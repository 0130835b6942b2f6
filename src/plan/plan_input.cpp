#include <string>

#include "shardtrain/plan/planner.h"
#include "shardtrain/runtime/error.h"

namespace shardtrain::plan {

namespace {
void positive(const char* opt, int64_t v, const char* hint) {
  if (v < 1)
    throw runtime::UsageError(std::string(opt) + " must be positive, got " + std::to_string(v) +
                              "; " + hint);
}
}  // namespace

void PlanInput::validate() const {
  if (gpus_per_node < 1) throw runtime::UsageError("--gpus-per-node must be >= 1");
  if (fsdp.shard_group_size < 0)
    throw runtime::UsageError("--shard-group-size must be >= 0 (0: one node)");
  positive("--seq-len", seq_len, "tokens per row");
  positive("--batch-size", batch_size, "rows per rank per micro-batch");
  positive("--grad-accum", grad_accum, "micro-batches per step");
  if (seq_len > model.max_position_embeddings)
    throw runtime::UsageError("--seq-len " + std::to_string(seq_len) +
                              " exceeds the model's max_position_embeddings (" +
                              std::to_string(model.max_position_embeddings) + ")");
  if (context_parallel < 1)
    throw runtime::UsageError("--context-parallel must be >= 1 (ranks per context group), got " +
                              std::to_string(context_parallel));
  if (gpus_per_node % context_parallel != 0)
    throw runtime::UsageError("--context-parallel " + std::to_string(context_parallel) +
                              " does not divide --gpus-per-node " + std::to_string(gpus_per_node) +
                              ": a context group is that many ranks of one node");
  if (context_parallel > 1 && packed)
    throw runtime::UsageError("--context-parallel " + std::to_string(context_parallel) +
                              " with --packed: the planner does not model the ring's document "
                              "masks; plan unpacked rows");
  if (!(default_mfu > 0 && default_mfu <= 1)) throw runtime::UsageError("--mfu must be in (0, 1]");
  if (run.fp8 != model::Fp8Mode::kOff) {
    const std::string opt = std::string("--fp8 ") + model::fp8_mode_name(run.fp8) + ": ";
    if (gpu.fp8_tflops <= 0)
      throw runtime::UsageError(opt + "--gpu " + gpu.name +
                                " has no float8 tensor cores (h100-80gb and h200-141gb have)");
  }
  // The combinations train refuses too are spec::validate's (the option parser calls it).
  fsdp.validate();  // the options plan shares with train: --max-inflight-gathers, the dtypes
  run.validate();   // the adapters' options
}

}  // namespace shardtrain::plan
