// Launchers of the float8 cast kernels (src/cuda/kernels/fp8_cast.cu): the amax, the scale and the
// saturating cast of a [rows, cols] contiguous tensor, written in the layouts the scaled GEMMs
// read, in as few passes over the input as the scaling allows. Element maths: fp8_math.h, so the
// kernels and the composite path (model/fp8.h) write the same bits. Each returns the launch's
// cudaError_t; inv is 1 / scale, the factor at::_scaled_mm multiplies by.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "shardtrain/cuda/kernels/fp8_math.h"
#include "shardtrain/cuda/kernels/fused_kernels.h"

namespace shardtrain::cuda::kernels {

// *amax (fp32, on the device) = max |x| over n contiguous elements; a NaN anywhere makes it NaN.
cudaError_t launch_fp8_amax(ElemType type, const void* x, int64_t n, float* amax,
                            cudaStream_t stream);

// One scale from *amax for the whole tensor: q [rows, cols] and qt [cols, rows] (the transpose)
// from one read of x; either may be null. *inv = 1 / scale.
cudaError_t launch_fp8_cast_transpose(ElemType type, const void* x, int64_t rows, int64_t cols,
                                      Fp8Format f, const float* amax, uint8_t* q, uint8_t* qt,
                                      float* inv, cudaStream_t stream);

// A scale per row: q [rows, cols], inv [rows]. One block per row: its amax, then its cast.
cudaError_t launch_fp8_rowwise(ElemType type, const void* x, int64_t rows, int64_t cols,
                               Fp8Format f, uint8_t* q, float* inv, cudaStream_t stream);

// A scale per column, written transposed: qt [cols, rows], inv [cols] (a scale per row of qt).
// Three launches: the columns' amax over row slabs (colwise_amax_blocks), the cast-transpose,
// and inv from the amax (held in inv meanwhile).
cudaError_t launch_fp8_colwise_transpose(ElemType type, const void* x, int64_t rows, int64_t cols,
                                         Fp8Format f, uint8_t* qt, float* inv, cudaStream_t stream);

}  // namespace shardtrain::cuda::kernels
