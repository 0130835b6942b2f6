#include "shardtrain/model/norm_activation.h"

#include <ATen/ATen.h>

namespace shardtrain::model {

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps, bool fused,
                    NormWeight style) {
  if (fused) {
    const at::Tensor w = style == NormWeight::kUnitOffset ? weight + 1 : weight;
    return std::get<0>(at::_fused_rms_norm(x, {x.size(-1)}, w, eps));
  }
  // Normalize in fp32 whatever the compute dtype, as transformers' RMSNorms do.
  auto xf = x.to(at::kFloat);
  auto var = xf.pow(2).mean(-1, true);
  xf = xf * at::rsqrt(var + eps);
  switch (style) {
    case NormWeight::kBeforeCast:  // Olmo2RMSNorm: the fp32 product, then x's dtype
      return (weight * xf).to(x.scalar_type());
    case NormWeight::kUnitOffset:  // Gemma's: x * (1 + w) in fp32
      return (xf * (weight.to(at::kFloat) + 1.0)).to(x.scalar_type());
    case NormWeight::kAfterCast:
      break;
  }
  return weight * xf.to(x.scalar_type());
}

at::Tensor activation(const std::string& name, const at::Tensor& x) {
  // transformers' ACT2FN: silu/swish = nn.SiLU, gelu = GELU (erf), gelu_pytorch_tanh = GELU(tanh),
  // relu.
  if (name == "gelu") return at::gelu(x);
  if (name == "gelu_pytorch_tanh") return at::gelu(x, "tanh");
  if (name == "relu") return at::relu(x);
  return at::silu(x);  // ModelConfig::validate() admits only hidden_acts()
}

}  // namespace shardtrain::model
