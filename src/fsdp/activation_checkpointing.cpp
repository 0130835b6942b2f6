#include "shardtrain/fsdp/activation_checkpointing.h"

#include "shardtrain/runtime/error.h"

namespace shardtrain::fsdp {

ActivationCheckpointing parse_activation_checkpointing(const std::string& mode, int64_t every) {
  ActivationCheckpointing ac;
  // A bare flag and the spellings a config file gave the former on/off switch (Boost's bool words).
  if (mode == "full" || mode.empty() || mode == "true" || mode == "on" || mode == "yes" ||
      mode == "1") {
    ac.mode = Recompute::kFull;
  } else if (mode == "selective") {
    ac.mode = Recompute::kSelective;
  } else if (mode != "none" && mode != "false" && mode != "off" && mode != "no" && mode != "0") {
    throw runtime::UsageError(
        "--activation-checkpointing must be none, selective or full (the bare flag: full), got '" +
        mode + "'");
  }
  if (every < 1)
    throw runtime::UsageError("--ac-every must be 1 or more (1: every decoder layer), got " +
                              std::to_string(every));
  if (every != 1 && ac.mode == Recompute::kNone)
    throw runtime::UsageError("--ac-every " + std::to_string(every) +
                              " needs --activation-checkpointing selective or full");
  ac.every = every;
  return ac;
}

const char* recompute_name(Recompute r) {
  switch (r) {
    case Recompute::kSelective:
      return "selective";
    case Recompute::kFull:
      return "full";
    default:
      return "none";
  }
}

std::string describe(const ActivationCheckpointing& ac) {
  if (!ac) return "off";
  const std::string s = recompute_name(ac.mode);
  if (ac.every == 1) return s;
  return s + " on layers 0, " + std::to_string(ac.every) + ", " + std::to_string(2 * ac.every) +
         ", ...";
}

int64_t layer_kept(const ActivationCheckpointing& ac, const model::ActivationBytes& act,
                   int64_t layer) {
  if (ac.full(layer)) return act.layer_input;
  if (ac.selective(layer)) return act.layer_selective;
  return act.layer;
}

int64_t layer_working(const ActivationCheckpointing& ac, const model::ActivationBytes& act,
                      int64_t layer) {
  if (ac.full(layer))
    return act.layer_backward + act.layer - act.layer_input;  // the recomputed layer's full set
  if (ac.selective(layer)) return act.layer_backward + act.selective_recompute;
  return act.layer_backward;
}

}  // namespace shardtrain::fsdp
