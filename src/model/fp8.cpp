#include "shardtrain/model/fp8.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <atomic>
#include <optional>
#include <utility>
#include <vector>

#include "shardtrain/model/projections.h"
#include "shardtrain/runtime/error.h"
#if defined(SHARDTRAIN_TORCH_CUDA) && defined(SHARDTRAIN_HAVE_CUDA)
#define SHARDTRAIN_FP8_KERNELS 1
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include "shardtrain/cuda/cuda_handles.h"
#include "shardtrain/cuda/kernels/fp8_kernels.h"
#include "shardtrain/model/kernel_launch.h"
#endif

namespace shardtrain::model {
namespace {

namespace kn = shardtrain::cuda::kernels;
std::atomic<int64_t> g_fp8_gemms{0};
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

at::ScalarType fp8_dtype(Fp8Format f) {
  return f == Fp8Format::kE4M3 ? at::kFloat8_e4m3fn : at::kFloat8_e5m2;
}

bool kernels_serve(const at::Tensor& x, Fp8Impl impl) {
#ifdef SHARDTRAIN_FP8_KERNELS
  const auto t = x.scalar_type();
  return impl == Fp8Impl::kAuto && x.is_cuda() &&
         (t == at::kFloat || t == at::kBFloat16 || t == at::kHalf);
#else
  (void)x;
  (void)impl;
  return false;
#endif
}

// LibTorch's ops in the order of fp8_math.h's element functions: amax, fp8_scale (an fp32
// division), saturate(v * scale), the cast; inv = 1 / scale.
Fp8Operand quantize_composite(const at::Tensor& x, Fp8Format f, bool rowwise, bool transpose) {
  const at::Tensor xf = (transpose ? x.t() : x).to(at::kFloat);
  const at::Tensor amax = rowwise ? xf.abs().amax({1}, /*keepdim=*/true) : xf.abs().amax();
  const double max = kn::fp8_max(f);
  const at::Tensor scale =
      at::div(at::scalar_tensor(max, xf.options()), amax.clamp_min(kn::kFp8AmaxFloor));
  Fp8Operand r;
  r.q = (xf * scale).clamp(-max, max).to(fp8_dtype(f)).contiguous();
  r.inv = scale.reciprocal();
  if (rowwise) r.inv = r.inv.squeeze(1);
  return r;
}

#ifdef SHARDTRAIN_FP8_KERNELS
void check_launch(cudaError_t err, const char* what) {
  TORCH_CHECK(err == cudaSuccess, what, ": ", cudaGetErrorString(err));
}

// Tensorwise: one amax pass, then one pass writing x as it is (rows) and/or transposed (t).
std::pair<Fp8Operand, Fp8Operand> tensorwise_kernels(const at::Tensor& x, Fp8Format f,
                                                     bool rows_out, bool t_out) {
  const int64_t rows = x.size(0);
  const int64_t cols = x.size(1);
  const cudaStream_t stream = kernel_stream(x);
  const auto f32 = x.options().dtype(at::kFloat);
  const at::Tensor amax = at::empty({}, f32);
  Fp8Operand a;
  Fp8Operand t;
  a.inv = at::empty({}, f32);
  t.inv = a.inv;
  if (rows_out) a.q = at::empty({rows, cols}, x.options().dtype(fp8_dtype(f)));
  if (t_out) t.q = at::empty({cols, rows}, x.options().dtype(fp8_dtype(f)));
  const auto bytes = [](const at::Tensor& q) {
    return q.defined() ? static_cast<uint8_t*>(q.data_ptr()) : nullptr;
  };
  check_launch(kn::launch_fp8_amax(kernel_elem_type(x.scalar_type()), x.const_data_ptr(), x.numel(),
                                   amax.mutable_data_ptr<float>(), stream),
               "fp8 amax");
  check_launch(
      kn::launch_fp8_cast_transpose(kernel_elem_type(x.scalar_type()), x.const_data_ptr(), rows,
                                    cols, f, amax.const_data_ptr<float>(), bytes(a.q), bytes(t.q),
                                    a.inv.mutable_data_ptr<float>(), stream),
      "fp8 cast");
  return {a, t};
}

Fp8Operand quantize_kernels(const at::Tensor& x_in, Fp8Format f, bool rowwise, bool transpose) {
  const c10::cuda::CUDAGuard guard(x_in.device());
  const at::Tensor x = x_in.contiguous();
  if (!rowwise) {
    auto both = tensorwise_kernels(x, f, !transpose, transpose);
    return transpose ? both.second : both.first;
  }
  const int64_t rows = x.size(0);
  const int64_t cols = x.size(1);
  Fp8Operand r;
  r.q = at::empty(transpose ? at::IntArrayRef{cols, rows} : at::IntArrayRef{rows, cols},
                  x.options().dtype(fp8_dtype(f)));
  r.inv = at::empty({transpose ? cols : rows}, x.options().dtype(at::kFloat));
  auto* q = static_cast<uint8_t*>(r.q.data_ptr());
  const auto type = kernel_elem_type(x.scalar_type());
  const cudaError_t err =
      transpose
          ? kn::launch_fp8_colwise_transpose(type, x.const_data_ptr(), rows, cols, f, q,
                                             r.inv.mutable_data_ptr<float>(), kernel_stream(x))
          : kn::launch_fp8_rowwise(type, x.const_data_ptr(), rows, cols, f, q,
                                   r.inv.mutable_data_ptr<float>(), kernel_stream(x));
  check_launch(err, "fp8 rowwise cast");
  return r;
}

// Tensorwise x and x^T from one amax and one cast pass.
std::pair<Fp8Operand, Fp8Operand> quantize_both_kernels(const at::Tensor& x_in, Fp8Format f) {
  const c10::cuda::CUDAGuard guard(x_in.device());
  return tensorwise_kernels(x_in.contiguous(), f, true, true);
}
#endif

// x [rows, cols] in float8 as it is and transposed: one cast pass for tensorwise scaling (the
// two share the scale), two for rowwise (a scale per row of each).
std::pair<Fp8Operand, Fp8Operand> quantize_both(const at::Tensor& x, Fp8Format f, bool rowwise,
                                                Fp8Impl impl) {
#ifdef SHARDTRAIN_FP8_KERNELS
  if (!rowwise && kernels_serve(x, impl) && x.numel() > 0) return quantize_both_kernels(x, f);
#endif
  return {fp8_quantize(x, f, rowwise, false, impl), fp8_quantize(x, f, rowwise, true, impl)};
}

// The inverse scales shaped as at::_scaled_mm reads them: [] or [m, 1] for a, [] or [1, n] for b.
at::Tensor scale_for(const Fp8Operand& op, bool left) {
  if (op.inv.dim() == 0) return op.inv;
  return left ? op.inv.unsqueeze(1) : op.inv.unsqueeze(0);
}

// _scaled_mm needs its operands' rows in multiples of 16 where they are a GEMM's k: the token
// count of the weight-gradient GEMM. Zero rows add nothing to any sum or amax.
constexpr int64_t kFp8Align = 16;

// t [..., k] as [rows, k] for the GEMMs: padded to a multiple of 16 where _scaled_mm runs.
at::Tensor gemm_rows(const at::Tensor& t, Fp8Impl impl) {
  const int64_t m = t.numel() / t.size(-1);
  const at::Tensor t2 = t.reshape({m, t.size(-1)});
  if (!kernels_serve(t, impl) || m % kFp8Align == 0) return t2;
  return at::constant_pad_nd(t2, {0, 0, 0, (m + kFp8Align - 1) / kFp8Align * kFp8Align - m});
}

// x [rows, cols] in float8 in the layouts asked for (either may be left undefined): as it is
// (for the GEMM that reduces over cols) and transposed (over rows).
std::pair<Fp8Operand, Fp8Operand> quantize_layouts(const at::Tensor& x, Fp8Format f, bool rowwise,
                                                   Fp8Impl impl, bool as_is, bool transposed) {
  if (as_is && transposed) return quantize_both(x, f, rowwise, impl);
  if (as_is) return {fp8_quantize(x, f, rowwise, false, impl), {}};
  if (transposed) return {{}, fp8_quantize(x, f, rowwise, true, impl)};
  return {};
}

// y [m', n] of padded rows back to t's leading shape with n last.
at::Tensor unpad_to(const at::Tensor& y, const at::Tensor& t) {
  std::vector<int64_t> shape = t.sizes().vec();
  shape.back() = y.size(1);
  return y.narrow(0, 0, t.numel() / t.size(-1)).view(shape);
}

class Fp8Linear : public torch::autograd::Function<Fp8Linear> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w,
                            int64_t mode, int64_t impl_i, bool w_grad) {
    const bool rowwise = static_cast<Fp8Mode>(mode) == Fp8Mode::kRowwise;
    const auto impl = static_cast<Fp8Impl>(impl_i);
    // x^T, for w's gradient, only where w trains.
    const auto [xq, xt] =
        quantize_layouts(gemm_rows(x, impl), Fp8Format::kE4M3, rowwise, impl, true, w_grad);
    const Fp8Operand wq = fp8_quantize(w, Fp8Format::kE4M3, rowwise, false, impl);
    ctx->save_for_backward({xt.q, xt.inv, w});
    ctx->saved_data["rowwise"] = rowwise;
    ctx->saved_data["impl"] = impl_i;
    return unpad_to(fp8_matmul(xq, wq, x.scalar_type(), impl, /*fast_accum=*/true), x);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const bool rowwise = ctx->saved_data["rowwise"].toBool();
    const auto impl = static_cast<Fp8Impl>(ctx->saved_data["impl"].toInt());
    const at::Tensor& w = saved[2];
    const at::Tensor& dy = grads[0];  // in x's dtype, as y is
    const bool x_grad = ctx->needs_input_grad(0);
    const bool w_grad = ctx->needs_input_grad(1);
    const auto [gq, gt] =
        quantize_layouts(gemm_rows(dy, impl), Fp8Format::kE5M2, rowwise, impl, x_grad, w_grad);
    // Fast accumulation: rowwise in all three GEMMs, as torchao's rowwise recipe (CUTLASS's
    // rowwise kernels are slow without it); tensorwise in the forward's only, as its default.
    at::Tensor dx;
    at::Tensor dw;
    if (x_grad) {
      const Fp8Operand wt = fp8_quantize(w, Fp8Format::kE4M3, rowwise, true, impl);
      dx = unpad_to(fp8_matmul(gq, wt, dy.scalar_type(), impl, rowwise), dy);
    }
    if (w_grad) dw = fp8_matmul(gt, Fp8Operand{saved[0], saved[1]}, w.scalar_type(), impl, rowwise);
    return {dx, dw, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

Fp8Mode parse_fp8_mode(const std::string& s) {
  if (const auto m = runtime::parse_enum(kFp8ModeNames, s)) return *m;
  throw runtime::UsageError("--fp8 must be " + runtime::enum_choices(kFp8ModeNames) + ", got '" +
                            s + "'");
}

const char* fp8_mode_name(Fp8Mode m) { return runtime::enum_name(kFp8ModeNames, m); }

Fp8Operand fp8_quantize(const at::Tensor& x, Fp8Format f, bool rowwise, bool transpose,
                        Fp8Impl impl) {
  TORCH_CHECK(x.dim() == 2, "fp8_quantize: x must be [rows, cols]");
#ifdef SHARDTRAIN_FP8_KERNELS
  if (kernels_serve(x, impl) && x.numel() > 0) return quantize_kernels(x, f, rowwise, transpose);
#endif
  return quantize_composite(x, f, rowwise, transpose);
}

at::Tensor fp8_matmul(const Fp8Operand& a, const Fp8Operand& b, at::ScalarType out, Fp8Impl impl,
                      bool fast_accum) {
  TORCH_CHECK(a.q.dim() == 2 && b.q.dim() == 2 && a.q.size(1) == b.q.size(1),
              "fp8_matmul: a [m, k] and b [n, k] differ in k");
  g_fp8_gemms.fetch_add(1, std::memory_order_relaxed);
#ifdef SHARDTRAIN_FP8_KERNELS
  if (impl == Fp8Impl::kAuto && a.q.is_cuda())
    return at::_scaled_mm(a.q, b.q.t(), scale_for(a, true), scale_for(b, false), std::nullopt,
                          std::nullopt, out, fast_accum);
#else
  (void)impl;
  (void)fast_accum;
#endif
  // Products of float8 values are exact in fp32; only the sums round, as in the tensor cores.
  const at::Tensor acc = at::mm(a.q.to(at::kFloat), b.q.to(at::kFloat).t());
  return (acc * scale_for(a, true) * scale_for(b, false)).to(out);
}

at::Tensor fp8_linear(const at::Tensor& x, const at::Tensor& w, Fp8Mode mode, Fp8Impl impl) {
  TORCH_CHECK(mode != Fp8Mode::kOff, "fp8_linear: mode off is at::linear");
  TORCH_CHECK(w.dim() == 2 && x.size(-1) == w.size(1), "fp8_linear: x [..., in], w [out, in]");
  // Forward runs with grad mode off: whether x^T is cast for w's gradient is decided here (not
  // under no_grad, as in validation or full checkpointing's first forward).
  const bool w_grad = at::GradMode::is_enabled() && w.requires_grad();
  return Fp8Linear::apply(x, w, static_cast<int64_t>(mode), static_cast<int64_t>(impl), w_grad);
}

int64_t fp8_gemm_count() { return g_fp8_gemms.load(std::memory_order_relaxed); }

bool fp8_kernels_built() {
#ifdef SHARDTRAIN_FP8_KERNELS
  return true;
#else
  return false;
#endif
}

std::string fp8_shape_problem(const ModelConfig& cfg) {
  if (cfg.is_moe())
    return cfg.model_type +
           " is a mixture of experts, whose experts' float8 GEMMs are not "
           "implemented";
  for (const Proj p : layer_projections(cfg)) {
    const ProjShape s = proj_shape(cfg, p);
    if (s.out % kFp8Align != 0 || s.in % kFp8Align != 0)
      return std::string(proj_name(p)) + " is [" + std::to_string(s.out) + ", " +
             std::to_string(s.in) + "]: float8 GEMMs need both dimensions in multiples of 16";
  }
  return "";
}

std::string fp8_device_problem(const at::Device& device) {
  // Which GPUs have them, said in each refusal: a user on the CPU or an A100 learns where to go.
  static const std::string kWhich = " (compute capability 8.9 or newer: L40S, H100, H200)";
  if (!device.is_cuda()) return "the CPU has no float8 tensor cores" + kWhich;
#ifdef SHARDTRAIN_FP8_KERNELS
  const cuda::DeviceInfo p = cuda::device_info(device.index());
  if (p.major * 10 + p.minor < 89)
    return p.name + " (compute capability " + std::to_string(p.major) + "." +
           std::to_string(p.minor) + ") has no float8 tensor cores" + kWhich;
  return "";
#else
  return "this build has no CUDA kernels";
#endif
}

}  // namespace shardtrain::model
