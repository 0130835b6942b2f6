// The model's training input: Hugging Face's input_ids and labels. Lives with the model, the
// lowest module that consumes it; the data loader produces it and the engine takes it.
#pragma once
#include <ATen/core/Tensor.h>

namespace shardtrain::model {

struct Batch {
  at::Tensor tokens;  // [B, T] int64
  at::Tensor labels;  // [B, T] int64: the token where the mask is set, else -100 (HF convention)
};

}  // namespace shardtrain::model
