// The model's training input: Hugging Face's input_ids and labels. Lives with the model, the
// lowest module that consumes it; the data loader produces it and the engine takes it.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace shardtrain::model {

struct Batch {
  at::Tensor tokens;  // [B, T] int64
  at::Tensor labels;  // [B, T] int64: the token where the mask is set, else -100 (HF convention)
  // [B, T] int64: each token's position in its document, 0 where a packed document starts (HF's
  // position_ids); undefined: one document per row, positions 0..T-1.
  at::Tensor positions;
  // [B] each row's sample (the token file's row) and the epoch it is read in: adapter dropout draws
  // a row's masks from these, so they do not depend on the rank or the batch layout. Empty: none.
  std::vector<int64_t> sample_ids;
  int64_t epoch = 0;
  // Labels already shifted: label t is token t's target (a context-parallel share, whose tokens
  // are not contiguous); false: Hugging Face's convention, label t + 1 is token t's target.
  bool aligned_labels = false;
};

}  // namespace shardtrain::model
