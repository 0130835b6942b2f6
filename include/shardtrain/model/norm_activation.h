// A decoder layer's RMSNorm and MLP activation, as transformers computes them.
#pragma once
#include <ATen/core/Tensor.h>

#include <string>

#include "shardtrain/model/family.h"

namespace shardtrain::model {

// style: how the family applies the weight (family.h). fused: at::_fused_rms_norm, which
// multiplies by the weight before rounding to x's dtype (Llama's transformers code rounds first:
// one bf16 ulp apart on some elements).
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps, bool fused = false,
                    NormWeight style = NormWeight::kAfterCast);
// The MLP's activation by config.json's hidden_act (hidden_acts()).
at::Tensor activation(const std::string& name, const at::Tensor& x);

}  // namespace shardtrain::model
