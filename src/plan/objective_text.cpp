#include "shardtrain/plan/objective_text.h"

#include <algorithm>
#include <cstdio>

namespace shardtrain::plan {
namespace {

double gib(int64_t b) { return static_cast<double>(b) / (1 << 30); }

}  // namespace

std::string describe_objective(const PlanInput& in) {
  if (!in.objective.dpo) return "";
  const ReferenceModel ref = reference_model(in.objective, in.run.adapters.enabled());
  return std::string(", DPO (") + std::to_string(micro_batch_rows(in.objective, in.batch_size)) +
         " rows per micro-batch, reference " +
         (ref == ReferenceModel::kFrozenCopy ? "a frozen copy"
          : ref == ReferenceModel::kBase     ? "the base, adapters off"
                                             : "--reference-logps") +
         ")";
}

std::string objective_line(const PlanInput& in, const std::vector<PlanRow>& rows) {
  if (!in.objective.dpo) return "";
  const ReferenceModel ref = reference_model(in.objective, in.run.adapters.enabled());
  const PlanRow* best = best_row(rows);
  const PlanRow* shown = best ? best : (rows.empty() ? nullptr : &rows.front());
  const std::string at = shown ? std::string(" at ") + fsdp::sharding_name(shown->sharding) +
                                     " on " + std::to_string(shown->nodes) + " node(s)"
                               : "";
  std::string out =
      "DPO: --batch-size " + std::to_string(in.batch_size) + " counts pairs, " +
      std::to_string(micro_batch_rows(in.objective, in.batch_size)) +
      " rows (chosen, rejected) per micro-batch, tok/s counting both; the head " +
      (head_recomputes_logits(in.objective, in.run.loss_chunk)
           ? "fused as --loss-chunk says, its backward recomputing each chunk's logits and "
             "holding an fp32 copy of each chunk's weight-gradient product, in activ."
           : "unfused (--loss-chunk off)") +
      "; reference: ";
  char line[400];
  if (ref == ReferenceModel::kNone)
    return out +
           "--reference-logps (eval --save-logps): no reference model in memory, no reference "
           "forward\n";
  if (ref == ReferenceModel::kFrozenCopy) {
    out +=
        "a frozen sharded copy of the starting weights (ref.: its fp32 parameter shards, no "
        "optimizer state or gradients";
    if (shown && shown->reference_host > 0)  // --cpu-offload: the master lives on the host
      std::snprintf(line, sizeof line, ", on the host: %.2f GiB per rank in host/node%s",
                    gib(shown->reference_host), at.c_str());
    else if (shown)
      std::snprintf(line, sizeof line, ", %.2f GiB per rank%s", gib(shown->reference), at.c_str());
    if (shown) out += line;
  } else {
    out += "the base with its adapters switched off (no second copy";
  }
  out += "), and one forward per micro-batch without autograd, in step(s)";
  if (shown && shown->step_s > 0) {
    std::snprintf(line, sizeof line, " (%.3f s of %.3f s", shown->reference_s, shown->step_s);
    out += line + at + ")";
  }
  const auto peaks = std::count_if(rows.begin(), rows.end(), [](const PlanRow& r) {
    return r.reference_peak > 0 && r.reference_peak >= r.tensor_peak;
  });
  if (peaks > 0)
    out += "; the reference's forward (its gathers and logits) sets the peak of " +
           std::to_string(peaks) + " row(s)";
  return out + (ref == ReferenceModel::kFrozenCopy
                    ? "; --reference-logps (eval --save-logps) drops both\n"
                    : "; --reference-logps (eval --save-logps) drops the forward\n");
}

}  // namespace shardtrain::plan
