#include "shardtrain/fsdp/engine_memory.h"

#include <algorithm>
#include <utility>

#ifdef SHARDTRAIN_HAVE_CUDA
#include "shardtrain/cuda/device_memory.h"
#endif

namespace shardtrain::fsdp {

EngineMemory::EngineMemory(MemoryReport report, at::Device device,
                           std::function<int64_t()> transient)
    : report_(report),
      device_(device),
      transient_(std::move(transient)),
      peaks_([this] { return read_and_reset_peak(); }) {}

void EngineMemory::note() {
  if (!device_.is_cuda()) phase_peak_ = std::max(phase_peak_, held_bytes());
}

MemoryPeaks EngineMemory::read_and_reset_peak() {
#ifdef SHARDTRAIN_HAVE_CUDA
  if (device_.is_cuda()) {
    const auto m = cuda::device_memory(device_.index());
    cuda::reset_peak_memory(device_.index());
    return {m.peak_allocated, m.peak_reserved};
  }
#endif
  note();
  const int64_t peak = phase_peak_;
  phase_peak_ = held_bytes();
  return {peak, peak};
}

int64_t EngineMemory::take_phase_peak() { return peaks_.close_phase().allocated; }

}  // namespace shardtrain::fsdp
