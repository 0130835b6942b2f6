// Float8 linear layers (--fp8): the decoder layers' projections multiply in float8 on Hopper's
// tensor cores, with dynamic scales from the current amax as torchao's float8 training does:
// weights and activations in e4m3, gradients in e5m2, one scale per tensor (tensorwise) or per
// row of each GEMM operand (rowwise). Masters, optimizer and everything outside the seven
// projections keep their dtypes; nothing in float8 outlives a step.
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <string>

#include "shardtrain/cuda/kernels/fp8_math.h"
#include "shardtrain/model/config.h"
#include "shardtrain/runtime/enum_names.h"

namespace shardtrain::model {

enum class Fp8Mode { kOff, kTensorwise, kRowwise };
inline constexpr runtime::EnumName<Fp8Mode> kFp8ModeNames[] = {
    {Fp8Mode::kOff, "off"}, {Fp8Mode::kTensorwise, "tensorwise"}, {Fp8Mode::kRowwise, "rowwise"}};
Fp8Mode parse_fp8_mode(const std::string& s);  // throws UsageError naming --fp8
const char* fp8_mode_name(Fp8Mode m);

using cuda::kernels::Fp8Format;

// How the casts and the GEMMs run. kAuto: shardtrain's cast kernels and at::_scaled_mm on a CUDA
// tensor, the emulation elsewhere. kEmulated: LibTorch's composite ops cast (the same bits as the
// kernels) and an fp32 GEMM over the float8 values, scaled after: the CPU path, and the GPU
// tests' reference.
enum class Fp8Impl { kAuto, kEmulated };

// A GEMM operand in float8: q [rows, k] row-major (a float8 dtype) and inv, the factor that
// undoes its scaling: [] (tensorwise) or [rows] (rowwise: one per row, scaled along k).
struct Fp8Operand {
  at::Tensor q;
  at::Tensor inv;
};

// x [rows, cols] (fp32, bf16 or fp16) in float8: as it is (transpose false) or as x^T
// [cols, rows] (true), with one scale (rowwise false) or one per row of the result.
Fp8Operand fp8_quantize(const at::Tensor& x, Fp8Format f, bool rowwise, bool transpose,
                        Fp8Impl impl = Fp8Impl::kAuto);
// a [m, k] and b [n, k] -> a @ b^T [m, n] in `out`, each product scaled back by a.inv and b.inv.
at::Tensor fp8_matmul(const Fp8Operand& a, const Fp8Operand& b, at::ScalarType out,
                      Fp8Impl impl = Fp8Impl::kAuto, bool fast_accum = false);

// x [..., in] @ w^T -> [..., out] in x's dtype, the forward and both backward GEMMs in float8
// (mode not kOff), as an autograd Function: x's gradient from e5m2(dy) and e4m3(w), w's from
// e5m2(dy)^T and e4m3(x). Keeps x in float8 for backward, not in x's dtype.
at::Tensor fp8_linear(const at::Tensor& x, const at::Tensor& w, Fp8Mode mode,
                      Fp8Impl impl = Fp8Impl::kAuto);

// The float8 GEMMs (fp8_matmul calls) this process has run: the tests count them to see that every
// projection's forward and backward went through float8, none left in the compute dtype.
int64_t fp8_gemm_count();

// Whether this build has shardtrain's float8 cast kernels (CUDA LibTorch and nvcc); without them
// a CUDA tensor takes the composite casts.
bool fp8_kernels_built();

// Why --fp8 cannot run on this model ("" when it can): at::_scaled_mm needs every projection's
// dimensions in multiples of 16.
std::string fp8_shape_problem(const ModelConfig& cfg);
// Why `device` cannot run --fp8 ("" when it can): float8 tensor cores need CUDA compute
// capability 8.9 (Ada, Hopper) or newer; a CPU has none (the emulation is for tests, not speed).
std::string fp8_device_problem(const at::Device& device);

}  // namespace shardtrain::model
