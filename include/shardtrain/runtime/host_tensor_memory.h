// Bytes held by CPU tensors, counted by a wrapper around LibTorch's CPU allocator: the host's
// equivalent of the CUDA caching allocator's allocated/peak figures, activations included. It
// measures what `shardtrain plan` predicts (tests/python/plan_validation.py).
#pragma once
#include <cstdint>

namespace shardtrain::runtime {

// Installs the counting allocator (idempotent). Tensors allocated before this are not counted.
void track_host_tensor_memory();
bool host_tensor_memory_tracked();
int64_t host_tensor_bytes();       // held now
int64_t host_tensor_peak_bytes();  // the most held since the last reset
void reset_host_tensor_peak();     // the peak restarts from what is held now

}  // namespace shardtrain::runtime
