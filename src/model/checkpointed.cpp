#include "shardtrain/model/checkpointed.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <functional>

#include "shardtrain/model/norm_activation.h"

namespace shardtrain::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// A region's backward: its ops again, with grad, on detached copies of the inputs it kept, then
// their gradients (undefined for an input that needs none).
variable_list rerun(const variable_list& saved,
                    const std::function<at::Tensor(const variable_list&)>& region,
                    const at::Tensor& grad_out) {
  variable_list inputs;
  variable_list wrt;
  for (const at::Tensor& s : saved) {
    // Detached: the recomputed graph ends here, and the gradients go back through this node.
    at::Tensor d = s.detach().requires_grad_(s.requires_grad());
    if (d.requires_grad()) wrt.push_back(d);
    inputs.push_back(d);
  }
  at::Tensor out;
  {
    at::AutoGradMode on(true);  // backward runs without grad unless asked to build a graph
    out = region(inputs);
  }
  const variable_list grads = torch::autograd::grad({out}, wrt, {grad_out}, /*retain_graph=*/false,
                                                    /*create_graph=*/false, /*allow_unused=*/true);
  variable_list result;
  size_t next = 0;
  for (const at::Tensor& d : inputs)
    result.push_back(d.requires_grad() ? grads[next++] : at::Tensor());
  return result;
}

// The Function machinery runs each forward below without grad: the region records no graph.
class CheckpointedNorm : public torch::autograd::Function<CheckpointedNorm> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            double eps, int64_t style) {
    ctx->save_for_backward({x, weight});
    ctx->saved_data["eps"] = eps;
    ctx->saved_data["style"] = style;
    return rms_norm(x, weight, eps, false, static_cast<NormWeight>(style));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const double eps = ctx->saved_data["eps"].toDouble();
    const auto style = static_cast<NormWeight>(ctx->saved_data["style"].toInt());
    const auto norm = [eps, style](const variable_list& in) {
      return rms_norm(in[0], in[1], eps, false, style);
    };
    variable_list grads = rerun(ctx->get_saved_variables(), norm, grad_outputs[0]);
    grads.emplace_back();  // eps
    grads.emplace_back();  // style
    return grads;
  }
};

class CheckpointedGated : public torch::autograd::Function<CheckpointedGated> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gate, const at::Tensor& up,
                            const std::string& act) {
    ctx->save_for_backward({gate, up});
    ctx->saved_data["act"] = act;
    return activation(act, gate) * up;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const std::string act = ctx->saved_data["act"].toStringRef();
    const auto gated = [&act](const variable_list& in) { return activation(act, in[0]) * in[1]; };
    variable_list grads = rerun(ctx->get_saved_variables(), gated, grad_outputs[0]);
    grads.emplace_back();  // act
    return grads;
  }
};

}  // namespace

at::Tensor checkpointed_rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps,
                                 NormWeight style) {
  return CheckpointedNorm::apply(x, weight, eps, static_cast<int64_t>(style));
}

at::Tensor checkpointed_gated(const std::string& act, const at::Tensor& gate,
                              const at::Tensor& up) {
  return CheckpointedGated::apply(gate, up, act);
}

}  // namespace shardtrain::model
