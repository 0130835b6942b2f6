#include "shardtrain/plan/remedy.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <sstream>

#include "shardtrain/plan/objective.h"

namespace shardtrain::plan {
namespace {

double gib(double b) { return b / (1 << 30); }

std::string size_list(const std::vector<int>& sizes) {
  std::string out;
  for (int n : sizes) out += (out.empty() ? "" : ", ") + std::to_string(n);
  return out;
}

bool full_every_layer(const fsdp::ActivationCheckpointing& ac) {
  return ac.mode == fsdp::Recompute::kFull && ac.every == 1;
}

}  // namespace

std::string Remedy::options() const {
  std::string out;
  if (context_parallel > 1) out = "--context-parallel " + std::to_string(context_parallel);
  if (checkpointing)  // on every layer: --ac-every 1 where the plan had another
    out += std::string(out.empty() ? "" : " ") + "--activation-checkpointing full" +
           (every_was > 1 ? " --ac-every 1" : "");
  return out;
}

Remedy search_remedy(const PlanInput& in, const std::vector<PlanRow>& rows) {
  Remedy s;
  if (best_row(rows)) return s;
  s.ran = true;
  const fsdp::ActivationCheckpointing full{fsdp::Recompute::kFull, 1};
  const auto fits = [&](int cp, bool checkpointing, std::vector<PlanRow>* planned) {
    PlanInput t = in;
    if (cp > 1) t.context_parallel = cp;
    if (checkpointing) t.fsdp.activation_checkpointing = full;
    *planned = plan_rows(t);
    const PlanRow* b = best_row(*planned);
    if (b) {
      s.best = *b;
      s.context_parallel = cp > 1 ? cp : 0;
      s.checkpointing = checkpointing;
    }
    return b != nullptr;
  };
  // Recomputation first: the same GPUs, about a third more compute.
  std::vector<PlanRow> cheapest = rows;
  s.tried_checkpointing = !full_every_layer(in.fsdp.activation_checkpointing);
  s.every_was = in.fsdp.activation_checkpointing.every;
  if (s.tried_checkpointing && fits(1, true, &cheapest)) return s;
  // Then a context group (packed rows refuse it), alone and with recomputation.
  s.context_searched = !in.context_parallel_given && !in.packed;
  if (s.context_searched) {
    for (int n = 2; n <= in.gpus_per_node; ++n)
      if (in.gpus_per_node % n == 0) s.context_sizes.push_back(n);
    std::vector<PlanRow> planned;
    for (int n : s.context_sizes)
      if (fits(n, false, &planned)) return s;
    if (s.tried_checkpointing)
      for (int n : s.context_sizes)
        if (fits(n, true, &planned)) return s;
  }
  // What stays per rank whatever the node count: more ranks and --cpu-offload shrink the state
  // (and a frozen reference's shard), not the activations or a gathered unit.
  int64_t floor = std::numeric_limits<int64_t>::max();
  for (const auto& r : cheapest) floor = std::min(floor, r.total - r.state_at_peak() - r.reference);
  s.unshardable_bytes = cheapest.empty() ? 0 : floor;
  s.activations_bind = in.gpu.memory_bytes > 0 && !cheapest.empty() &&
                       static_cast<double>(floor) > in.gpu.memory_bytes;
  return s;
}

std::string remedy_text(const PlanInput& in, const std::vector<PlanRow>& rows, const Remedy& r) {
  std::ostringstream os;
  const std::string tried = "tried " + size_list(r.context_sizes) +
                            ", the divisors of --gpus-per-node " + std::to_string(in.gpus_per_node);
  if (r.found() && r.context_parallel == 0) {
    os << "nothing fits as planned; " << r.options() << " fits (" << fit_summary(in, r.best)
       << "): the cheapest change, recomputing each layer's forward in its backward on the same "
          "GPUs; plan it with "
       << r.options() << "\n";
    return os.str();
  }
  if (r.found()) {
    os << "nothing fits as planned"
       << (r.tried_checkpointing ? ", nor with --activation-checkpointing full alone" : "") << "\n"
       << "smallest context parallel that fits: " << r.context_parallel
       << (r.checkpointing ? " with --activation-checkpointing full" : "") << " ("
       << fit_summary(in, r.best) << "; " << tried << "): plan it with " << r.options() << "\n";
    return os.str();
  }
  const bool ac_said = r.tried_checkpointing || full_every_layer(in.fsdp.activation_checkpointing);
  const std::string no_context = r.context_searched && !r.context_sizes.empty()
                                     ? "; no context parallel fits either (" + tried +
                                           ", with --activation-checkpointing full too)"
                                     : "";
  if (r.activations_bind) {
    std::vector<std::string> shrink_state = {"more nodes"};
    if (!in.fsdp.cpu_offload) shrink_state.push_back("--cpu-offload");
    if (!in.run.adapters.enabled()) shrink_state.push_back("LoRA");
    std::string state_only = shrink_state[0];
    for (size_t i = 1; i < shrink_state.size(); ++i)
      state_only += (i + 1 == shrink_state.size() ? " or " : ", ") + shrink_state[i];
    char line[300];
    std::snprintf(line, sizeof line,
                  "nothing fits: activations, a gathered unit and the allowances need %.1f GiB per "
                  "rank%s, more than the GPU's %.0f GiB at any node count (%s would shrink only "
                  "the state): use a smaller --seq-len or --batch-size",
                  gib(static_cast<double>(r.unshardable_bytes)),
                  ac_said ? " with --activation-checkpointing full" : "", gib(in.gpu.memory_bytes),
                  state_only.c_str());
    const bool larger_group =  // a given group that a larger one of the node would split further
        in.context_parallel_given && !in.packed && in.context_parallel < in.gpus_per_node;
    os << line
       << (larger_group ? ", or a larger --context-parallel (a divisor of --gpus-per-node " +
                              std::to_string(in.gpus_per_node) + ")"
                        : "")
       << (r.context_searched && r.context_sizes.empty()
               ? ", or --context-parallel over several GPUs of a node (--gpus-per-node " +
                     std::to_string(in.gpus_per_node) + " leaves none to split a row across)"
               : "")
       << no_context << "\n";
    return os.str();
  }
  const bool offload = in.fsdp.cpu_offload;
  const bool ref =
      reference_model(in.objective, in.run.adapters.enabled()) == ReferenceModel::kFrozenCopy;
  os << "nothing fits"
     << (r.tried_checkpointing ? ", even with --activation-checkpointing full" : "")
     << ": try more nodes, a smaller --batch-size or --seq-len"
     << (ref ? ", --reference-logps (no reference model)" : "")
     << (in.run.adapters.enabled() ? ""
         : offload                 ? ", or LoRA (--lora-rank)"
                                   : ", --cpu-offload, or LoRA (--lora-rank)")
     << (std::any_of(rows.begin(), rows.end(), [](const PlanRow& x) { return !x.host_fits; })
             ? "; hosts with more memory (--host-memory-gib)"
             : "")
     << no_context << "\n";
  return os.str();
}

}  // namespace shardtrain::plan
