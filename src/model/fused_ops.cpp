#include "shardtrain/model/fused_ops.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "shardtrain/cuda/kernels/rope_math.h"
#include "shardtrain/cuda/kernels/swiglu_math.h"
#ifdef SHARDTRAIN_TORCH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "shardtrain/cuda/kernels/fused_kernels.h"
#include "shardtrain/model/kernel_launch.h"
#endif

namespace shardtrain::model {
namespace {

namespace kn = shardtrain::cuda::kernels;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

bool fused_dtype(at::ScalarType t) {
  return t == at::kFloat || t == at::kBFloat16 || t == at::kHalf;
}

// Calls f with the rounding policy of dtype t (elem_round.h).
template <class F>
void with_rounding(at::ScalarType t, F&& f) {
  if (t == at::kBFloat16) return f(kn::RoundBF16{});
  if (t == at::kHalf) return f(kn::RoundF16{});
  return f(kn::RoundF32{});
}

bool on_cuda(const at::Tensor& x) {
#ifdef SHARDTRAIN_TORCH_CUDA
  return x.is_cuda();
#else
  (void)x;
  return false;
#endif
}

void check_rope_inputs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& cos,
                       const at::Tensor& sin, const at::Tensor& positions) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4, "fused_rotary: q and k must be [B, heads, T, D]");
  TORCH_CHECK(q.size(0) == k.size(0) && q.size(2) == k.size(2) && q.size(3) == k.size(3),
              "fused_rotary: q and k differ in B, T or D");
  TORCH_CHECK(q.size(3) % 2 == 0, "fused_rotary: head_dim must be even");
  TORCH_CHECK(fused_dtype(q.scalar_type()), "fused_rotary: q must be fp32, bf16 or fp16");
  for (const at::Tensor* t : {&k, &cos, &sin})
    TORCH_CHECK(t->scalar_type() == q.scalar_type(),
                "fused_rotary: k, cos and sin must be in q's dtype");
  TORCH_CHECK(cos.sizes() == sin.sizes(), "fused_rotary: cos and sin differ in shape");
  TORCH_CHECK(!cos.requires_grad() && !sin.requires_grad(),
              "fused_rotary: the tables take no gradient");
  TORCH_CHECK(cos.device() == q.device() && k.device() == q.device(),
              "fused_rotary: inputs on different devices");
  const int64_t B = q.size(0), T = q.size(2), D = q.size(3);
  if (positions.defined()) {
    TORCH_CHECK(positions.dim() == 2 && positions.size(0) == B && positions.size(1) == T,
                "fused_rotary_at: positions must be [B, T]");
    TORCH_CHECK(!at::isFloatingType(positions.scalar_type()),
                "fused_rotary_at: positions must be integers");
    TORCH_CHECK(positions.device() == q.device(),
                "fused_rotary_at: positions must be on q's device");
    TORCH_CHECK(cos.dim() == 2 && cos.size(1) == D,
                "fused_rotary_at: cos/sin must be [max_pos, D]");
    return;
  }
  const bool plain = cos.dim() == 2 && cos.size(0) == T && cos.size(1) == D;
  const bool gathered = cos.dim() == 4 && cos.size(0) == B && cos.size(1) == 1 &&
                        cos.size(2) == T && cos.size(3) == D;
  TORCH_CHECK(plain || gathered, "fused_rotary: cos/sin must be [T, D] or [B, 1, T, D]");
}

// The host loop: each token's table row as [B, T, D] fp32 (exact: a widening), x as [B, H, T, D].
at::Tensor rope_host_one(const at::Tensor& x, const at::Tensor& cos_rows,
                         const at::Tensor& sin_rows, bool backward) {
  const at::Tensor xf = x.to(at::kFloat).contiguous();
  at::Tensor yf = at::empty_like(xf);
  const int64_t B = x.size(0), H = x.size(1), T = x.size(2), D = x.size(3), half = D / 2;
  const float* xs = xf.const_data_ptr<float>();
  const float* cs = cos_rows.const_data_ptr<float>();
  const float* ss = sin_rows.const_data_ptr<float>();
  float* ys = yf.mutable_data_ptr<float>();
  with_rounding(x.scalar_type(), [&](auto r) {
    using R = decltype(r);
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t t = 0; t < T; ++t) {
          const float* c = cs + (b * T + t) * D;
          const float* s = ss + (b * T + t) * D;
          const int64_t base = ((b * H + h) * T + t) * D;
          for (int64_t d = 0; d < half; ++d) {
            const float x1 = xs[base + d];
            const float x2 = xs[base + d + half];
            float* y1 = ys + base + d;
            float* y2 = ys + base + d + half;
            if (backward) {
              kn::rope_backward_pair<R>(x1, x2, c[d], c[d + half], s[d], s[d + half], y1, y2);
            } else {
              kn::rope_forward_pair<R>(x1, x2, c[d], c[d + half], s[d], s[d + half], y1, y2);
            }
          }
        }
      }
    }
  });
  return yf.to(x.scalar_type());  // exact: every value is already rounded to the dtype
}

// The table as one fp32 row per token, [B, T, D].
at::Tensor token_rows(const at::Tensor& table, const at::Tensor& positions, int64_t B, int64_t T) {
  const int64_t D = table.size(-1);
  at::Tensor rows;
  if (positions.defined()) {
    const at::Tensor index = positions.to(at::kLong).flatten();
    TORCH_CHECK(index.numel() == 0 || (index.min().item<int64_t>() >= 0 &&
                                       index.max().item<int64_t>() < table.size(0)),
                "fused_rotary_at: a position lies outside the table");
    rows = table.index_select(0, index).view({B, T, D});
  } else if (table.dim() == 2) {
    rows = table.unsqueeze(0).expand({B, T, D});
  } else {
    rows = table.squeeze(1);
  }
  return rows.to(at::kFloat).contiguous();
}

std::pair<at::Tensor, at::Tensor> rope_host(const at::Tensor& q, const at::Tensor& k,
                                            const at::Tensor& cos, const at::Tensor& sin,
                                            const at::Tensor& positions, bool backward) {
  const int64_t B = q.size(0), T = q.size(2);
  const at::Tensor c = token_rows(cos, positions, B, T);
  const at::Tensor s = token_rows(sin, positions, B, T);
  return {rope_host_one(q, c, s, backward), rope_host_one(k, c, s, backward)};
}

#ifdef SHARDTRAIN_TORCH_CUDA
// D must be contiguous; other strides the kernel takes as they are.
at::Tensor last_dim_contiguous(const at::Tensor& x) {
  return x.stride(-1) == 1 ? x : x.contiguous();
}

kn::RopeOperand rope_operand(const at::Tensor& x, const at::Tensor& y) {
  kn::RopeOperand op;
  op.x = x.const_data_ptr();
  op.y = y.mutable_data_ptr();
  op.heads = x.size(1);
  for (int i = 0; i < 3; ++i) {
    op.x_stride[i] = x.stride(i);
    op.y_stride[i] = y.stride(i);
  }
  return op;
}

std::pair<at::Tensor, at::Tensor> rope_cuda(const at::Tensor& q_in, const at::Tensor& k_in,
                                            const at::Tensor& cos_in, const at::Tensor& sin_in,
                                            const at::Tensor& positions_in, bool backward) {
  const c10::cuda::CUDAGuard guard(q_in.device());
  const at::Tensor q = last_dim_contiguous(q_in);
  const at::Tensor k = last_dim_contiguous(k_in);
  const at::Tensor cos = cos_in.contiguous();
  const at::Tensor sin = sin_in.contiguous();
  at::Tensor qy =
      at::empty_like(q);  // dense inputs keep their strides (decoder_layer's transposed views)
  at::Tensor ky = at::empty_like(k);
  kn::RopeArgs a;
  a.type = kernel_elem_type(q.scalar_type());
  a.batch = q.size(0);
  a.seq = q.size(2);
  a.head_dim = q.size(3);
  a.q = rope_operand(q, qy);
  a.k = rope_operand(k, ky);
  a.cos = cos.const_data_ptr();
  a.sin = sin.const_data_ptr();
  a.backward = backward;
  at::Tensor positions;
  if (positions_in.defined()) {
    positions = positions_in.to(at::kLong).contiguous();
    a.positions = positions.const_data_ptr<int64_t>();
  } else if (cos.dim() == 4) {
    a.table_stride_b = cos.stride(0);
    a.table_stride_t = cos.stride(2);
  } else {
    a.table_stride_t = cos.stride(0);
  }
  const cudaError_t err = kn::launch_rope(a, kernel_stream(q));
  TORCH_CHECK(err == cudaSuccess, "fused_rotary: launch failed: ", cudaGetErrorString(err));
  return {qy, ky};
}
#endif

std::pair<at::Tensor, at::Tensor> rope_apply(const at::Tensor& q, const at::Tensor& k,
                                             const at::Tensor& cos, const at::Tensor& sin,
                                             const at::Tensor& positions, bool backward) {
#ifdef SHARDTRAIN_TORCH_CUDA
  if (on_cuda(q)) return rope_cuda(q, k, cos, sin, positions, backward);
#endif
  return rope_host(q, k, cos, sin, positions, backward);
}

// The Function machinery runs forward without grad; backward materializes an unused output's
// gradient as zeros.
class FusedRotary : public torch::autograd::Function<FusedRotary> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                               const at::Tensor& cos, const at::Tensor& sin,
                               const std::optional<at::Tensor>& positions_opt) {
    const at::Tensor positions =
        positions_opt.value_or(at::Tensor());  // an undefined Tensor argument is refused
    ctx->save_for_backward({cos, sin, positions});
    auto [qr, kr] = rope_apply(q, k, cos, sin, positions, /*backward=*/false);
    return {qr, kr};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    auto [dq, dk] = rope_apply(grads[0], grads[1], saved[0], saved[1], saved[2], /*backward=*/true);
    return {dq, dk, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

void check_swiglu_inputs(const at::Tensor& gate, const at::Tensor& up) {
  TORCH_CHECK(gate.sizes() == up.sizes(), "fused_swiglu: gate and up differ in shape");
  TORCH_CHECK(gate.scalar_type() == up.scalar_type(), "fused_swiglu: gate and up differ in dtype");
  TORCH_CHECK(gate.device() == up.device(), "fused_swiglu: gate and up on different devices");
  TORCH_CHECK(fused_dtype(gate.scalar_type()), "fused_swiglu: gate must be fp32, bf16 or fp16");
}

at::Tensor swiglu_host_forward(const at::Tensor& gate, const at::Tensor& up) {
  const at::Tensor g = gate.to(at::kFloat).contiguous();
  const at::Tensor u = up.to(at::kFloat).contiguous();
  at::Tensor out = at::empty_like(g);
  const float* gs = g.const_data_ptr<float>();
  const float* us = u.const_data_ptr<float>();
  float* os = out.mutable_data_ptr<float>();
  with_rounding(gate.scalar_type(), [&](auto r) {
    using R = decltype(r);
    for (int64_t i = 0; i < g.numel(); ++i) os[i] = kn::swiglu_forward<R>(gs[i], us[i]);
  });
  return out.to(gate.scalar_type());
}

std::pair<at::Tensor, at::Tensor> swiglu_host_backward(const at::Tensor& dy, const at::Tensor& gate,
                                                       const at::Tensor& up) {
  const at::Tensor d = dy.to(at::kFloat).contiguous();
  const at::Tensor g = gate.to(at::kFloat).contiguous();
  const at::Tensor u = up.to(at::kFloat).contiguous();
  at::Tensor dg = at::empty_like(g);
  at::Tensor du = at::empty_like(g);
  const float* ds = d.const_data_ptr<float>();
  const float* gs = g.const_data_ptr<float>();
  const float* us = u.const_data_ptr<float>();
  float* dgs = dg.mutable_data_ptr<float>();
  float* dus = du.mutable_data_ptr<float>();
  with_rounding(gate.scalar_type(), [&](auto r) {
    using R = decltype(r);
    for (int64_t i = 0; i < g.numel(); ++i)
      kn::swiglu_backward<R>(ds[i], gs[i], us[i], dgs + i, dus + i);
  });
  return {dg.to(gate.scalar_type()), du.to(gate.scalar_type())};
}

#ifdef SHARDTRAIN_TORCH_CUDA
at::Tensor swiglu_cuda_forward(const at::Tensor& gate_in, const at::Tensor& up_in) {
  const c10::cuda::CUDAGuard guard(gate_in.device());
  const at::Tensor gate = gate_in.contiguous();
  const at::Tensor up = up_in.contiguous();
  at::Tensor out = at::empty_like(gate, at::MemoryFormat::Contiguous);
  const cudaError_t err = kn::launch_swiglu_forward(
      kernel_elem_type(gate.scalar_type()), gate.const_data_ptr(), up.const_data_ptr(),
      out.mutable_data_ptr(), gate.numel(), kernel_stream(gate));
  TORCH_CHECK(err == cudaSuccess, "fused_swiglu: launch failed: ", cudaGetErrorString(err));
  return out;
}

std::pair<at::Tensor, at::Tensor> swiglu_cuda_backward(const at::Tensor& dy_in,
                                                       const at::Tensor& gate_in,
                                                       const at::Tensor& up_in) {
  const c10::cuda::CUDAGuard guard(gate_in.device());
  const at::Tensor dy = dy_in.contiguous();
  const at::Tensor gate = gate_in.contiguous();
  const at::Tensor up = up_in.contiguous();
  at::Tensor dg = at::empty_like(gate, at::MemoryFormat::Contiguous);
  at::Tensor du = at::empty_like(gate, at::MemoryFormat::Contiguous);
  const cudaError_t err =
      kn::launch_swiglu_backward(kernel_elem_type(gate.scalar_type()), dy.const_data_ptr(),
                                 gate.const_data_ptr(), up.const_data_ptr(), dg.mutable_data_ptr(),
                                 du.mutable_data_ptr(), gate.numel(), kernel_stream(gate));
  TORCH_CHECK(err == cudaSuccess,
              "fused_swiglu: backward launch failed: ", cudaGetErrorString(err));
  return {dg, du};
}
#endif

class FusedSwiGLU : public torch::autograd::Function<FusedSwiGLU> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gate, const at::Tensor& up) {
    ctx->save_for_backward({gate, up});
#ifdef SHARDTRAIN_TORCH_CUDA
    if (on_cuda(gate)) return swiglu_cuda_forward(gate, up);
#endif
    return swiglu_host_forward(gate, up);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor& dy = grads[0];
#ifdef SHARDTRAIN_TORCH_CUDA
    if (on_cuda(dy)) {
      auto [dg, du] = swiglu_cuda_backward(dy, saved[0], saved[1]);
      return {dg, du};
    }
#endif
    auto [dg, du] = swiglu_host_backward(dy, saved[0], saved[1]);
    return {dg, du};
  }
};

void check_swiglu_merged_input(const at::Tensor& gate_up) {
  TORCH_CHECK(gate_up.dim() >= 1, "fused_swiglu_merged: gate_up must be [..., 2F]");
  TORCH_CHECK(gate_up.size(-1) % 2 == 0, "fused_swiglu_merged: gate_up's last dimension (",
              gate_up.size(-1), ") must be even: gate and up, F each");
  TORCH_CHECK(gate_up.is_contiguous(),
              "fused_swiglu_merged: gate_up must be contiguous (the merged GEMM's output)");
  TORCH_CHECK(fused_dtype(gate_up.scalar_type()),
              "fused_swiglu_merged: gate_up must be fp32, bf16 or fp16");
}

// gate_up's shape with the last dimension halved: the output's and dy's.
std::vector<int64_t> merged_out_shape(const at::Tensor& gate_up) {
  std::vector<int64_t> shape(gate_up.sizes().begin(), gate_up.sizes().end());
  shape.back() /= 2;
  return shape;
}

at::Tensor swiglu_merged_host_forward(const at::Tensor& gate_up) {
  const at::Tensor gu = gate_up.to(at::kFloat).contiguous();
  const int64_t F = gate_up.size(-1) / 2, rows = F == 0 ? 0 : gate_up.numel() / (2 * F);
  at::Tensor out = at::empty(merged_out_shape(gate_up), gu.options());
  const float* gs = gu.const_data_ptr<float>();
  float* os = out.mutable_data_ptr<float>();
  with_rounding(gate_up.scalar_type(), [&](auto r) {
    using R = decltype(r);
    for (int64_t row = 0; row < rows; ++row) {
      const float* g = gs + row * 2 * F;
      const float* u = g + F;
      float* o = os + row * F;
      for (int64_t c = 0; c < F; ++c) o[c] = kn::swiglu_forward<R>(g[c], u[c]);
    }
  });
  return out.to(gate_up.scalar_type());
}

at::Tensor swiglu_merged_host_backward(const at::Tensor& dy, const at::Tensor& gate_up) {
  const at::Tensor d = dy.to(at::kFloat).contiguous();
  const at::Tensor gu = gate_up.to(at::kFloat).contiguous();
  const int64_t F = gate_up.size(-1) / 2, rows = F == 0 ? 0 : gate_up.numel() / (2 * F);
  at::Tensor dgu = at::empty_like(gu);
  const float* ds = d.const_data_ptr<float>();
  const float* gs = gu.const_data_ptr<float>();
  float* dgs = dgu.mutable_data_ptr<float>();
  with_rounding(gate_up.scalar_type(), [&](auto r) {
    using R = decltype(r);
    for (int64_t row = 0; row < rows; ++row) {
      const float* dr = ds + row * F;
      const float* g = gs + row * 2 * F;
      float* dg = dgs + row * 2 * F;
      for (int64_t c = 0; c < F; ++c)
        kn::swiglu_backward<R>(dr[c], g[c], g[c + F], dg + c, dg + c + F);
    }
  });
  return dgu.to(gate_up.scalar_type());
}

#ifdef SHARDTRAIN_TORCH_CUDA
at::Tensor swiglu_merged_cuda_forward(const at::Tensor& gate_up) {
  const c10::cuda::CUDAGuard guard(gate_up.device());
  const int64_t F = gate_up.size(-1) / 2, rows = F == 0 ? 0 : gate_up.numel() / (2 * F);
  at::Tensor out = at::empty(merged_out_shape(gate_up), gate_up.options());
  const cudaError_t err = kn::launch_swiglu_merged_forward(
      kernel_elem_type(gate_up.scalar_type()), gate_up.const_data_ptr(), out.mutable_data_ptr(),
      rows, F, kernel_stream(gate_up));
  TORCH_CHECK(err == cudaSuccess, "fused_swiglu_merged: launch failed: ", cudaGetErrorString(err));
  return out;
}

at::Tensor swiglu_merged_cuda_backward(const at::Tensor& dy_in, const at::Tensor& gate_up) {
  const c10::cuda::CUDAGuard guard(gate_up.device());
  const at::Tensor dy = dy_in.contiguous();
  const int64_t F = gate_up.size(-1) / 2, rows = F == 0 ? 0 : gate_up.numel() / (2 * F);
  at::Tensor dgu = at::empty_like(gate_up, at::MemoryFormat::Contiguous);
  const cudaError_t err = kn::launch_swiglu_merged_backward(
      kernel_elem_type(gate_up.scalar_type()), dy.const_data_ptr(), gate_up.const_data_ptr(),
      dgu.mutable_data_ptr(), rows, F, kernel_stream(gate_up));
  TORCH_CHECK(err == cudaSuccess,
              "fused_swiglu_merged: backward launch failed: ", cudaGetErrorString(err));
  return dgu;
}
#endif

class FusedSwiGLUMerged : public torch::autograd::Function<FusedSwiGLUMerged> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gate_up) {
    ctx->save_for_backward({gate_up});
#ifdef SHARDTRAIN_TORCH_CUDA
    if (on_cuda(gate_up)) return swiglu_merged_cuda_forward(gate_up);
#endif
    return swiglu_merged_host_forward(gate_up);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor& dy = grads[0];
#ifdef SHARDTRAIN_TORCH_CUDA
    if (on_cuda(dy)) return {swiglu_merged_cuda_backward(dy, saved[0])};
#endif
    return {swiglu_merged_host_backward(dy, saved[0])};
  }
};

}  // namespace

bool fused_kernels_available(const at::Tensor& x) {
  return on_cuda(x) && fused_dtype(x.scalar_type());
}

std::pair<at::Tensor, at::Tensor> fused_rotary(const at::Tensor& q, const at::Tensor& k,
                                               const at::Tensor& cos, const at::Tensor& sin) {
  check_rope_inputs(q, k, cos, sin, at::Tensor());
  const variable_list out = FusedRotary::apply(q, k, cos, sin, std::optional<at::Tensor>());
  return {out[0], out[1]};
}

std::pair<at::Tensor, at::Tensor> fused_rotary_at(const at::Tensor& q, const at::Tensor& k,
                                                  const at::Tensor& cos, const at::Tensor& sin,
                                                  const at::Tensor& positions) {
  TORCH_CHECK(positions.defined(),
              "fused_rotary_at: positions undefined (fused_rotary takes the [T, D] tables)");
  check_rope_inputs(q, k, cos, sin, positions);
  const variable_list out =
      FusedRotary::apply(q, k, cos, sin, std::optional<at::Tensor>(positions));
  return {out[0], out[1]};
}

bool fused_swiglu_supports(const std::string& act) { return act == "silu" || act == "swish"; }

at::Tensor fused_swiglu(const at::Tensor& gate, const at::Tensor& up) {
  check_swiglu_inputs(gate, up);
  return FusedSwiGLU::apply(gate, up);
}

at::Tensor fused_swiglu_merged(const at::Tensor& gate_up) {
  check_swiglu_merged_input(gate_up);
  return FusedSwiGLUMerged::apply(gate_up);
}

}  // namespace shardtrain::model
