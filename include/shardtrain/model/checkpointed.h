// Selective activation checkpointing's regions: cheap ops (a norm, the MLP's activation and its
// product with up) that keep only their inputs for backward and, when backward reaches them, run
// again with grad on those inputs and differentiate themselves (torch.utils.checkpoint for one
// small region). The recomputation is the same ops on the same values, so the gradients are the
// plain graph's.
#pragma once
#include <ATen/core/Tensor.h>

#include <string>

#include "shardtrain/model/family.h"

namespace shardtrain::model {

// rms_norm(x, weight, eps), keeping x and the weight but not the fp32 normalized tensor.
at::Tensor checkpointed_rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps,
                                 NormWeight style = NormWeight::kAfterCast);
// activation(act, gate) * up, keeping gate and up but not the activation's output.
at::Tensor checkpointed_gated(const std::string& act, const at::Tensor& gate, const at::Tensor& up);

}  // namespace shardtrain::model
