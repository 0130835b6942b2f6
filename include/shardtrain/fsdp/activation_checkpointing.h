// Activation checkpointing's setting (--activation-checkpointing, --ac-every): which decoder
// layers give up saved activations for recomputation in backward, and how much each gives up;
// and what that leaves autograd holding per token, for the planner's walk of a step.
#pragma once
#include <cstdint>
#include <string>

#include "shardtrain/model/activation_memory.h"

namespace shardtrain::fsdp {

// full: a layer keeps only its input and runs again whole in backward. selective: a layer keeps
// its projections' and attention's outputs and re-runs only its RMSNorms and the MLP's
// activation and product (model/checkpointed.h), as torchtitan's op-level selective AC does.
enum class Recompute { kNone, kSelective, kFull };

struct ActivationCheckpointing {
  Recompute mode = Recompute::kNone;
  int64_t every =
      1;  // only layers whose index is a multiple of it: 2 checkpoints every other layer
  bool full(int64_t layer) const { return mode == Recompute::kFull && layer % every == 0; }
  bool selective(int64_t layer) const {
    return mode == Recompute::kSelective && layer % every == 0;
  }
  // Whether any layer recomputes anything.
  explicit operator bool() const { return mode != Recompute::kNone; }
};

// --activation-checkpointing none|selective|full (a config file's true/false, which the former
// switch took, mean full/none) and --ac-every N >= 1; throws UsageError naming the option.
ActivationCheckpointing parse_activation_checkpointing(const std::string& mode, int64_t every);
const char* recompute_name(Recompute r);  // none, selective, full
std::string describe(
    const ActivationCheckpointing& ac);  // "off", "selective", "full on layers 0, 2, 4, ..."

// Per token, what autograd keeps of decoder layer `layer` once its forward is done.
int64_t layer_kept(const ActivationCheckpointing& ac, const model::ActivationBytes& act,
                   int64_t layer);
// Per token, what it holds beside that while the layer's backward runs: the gradients, and the
// tensors its recomputation makes.
int64_t layer_working(const ActivationCheckpointing& ac, const model::ActivationBytes& act,
                      int64_t layer);

}  // namespace shardtrain::fsdp
