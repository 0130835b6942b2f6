// What the model's autograd Functions hand shardtrain's CUDA kernels (cuda/kernels/): the
// element type of a tensor and the stream it is computed on. CUDA LibTorch builds only.
#pragma once
#ifdef SHARDTRAIN_TORCH_CUDA
#include <ATen/core/Tensor.h>
#include <c10/cuda/CUDAStream.h>

#include "shardtrain/cuda/kernels/fused_kernels.h"

namespace shardtrain::model {

// fp32, bf16 or fp16 (the callers check which dtypes their kernels take).
inline cuda::kernels::ElemType kernel_elem_type(at::ScalarType t) {
  if (t == at::kBFloat16) return cuda::kernels::ElemType::kBFloat16;
  if (t == at::kHalf) return cuda::kernels::ElemType::kFloat16;
  return cuda::kernels::ElemType::kFloat32;
}

inline cudaStream_t kernel_stream(const at::Tensor& x) {
  return c10::cuda::getCurrentCUDAStream(x.device().index()).stream();
}

}  // namespace shardtrain::model
#endif
