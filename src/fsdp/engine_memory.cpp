// Memory accounting: what the engine holds (CPU), the allocator's peaks (GPU), and the report
// of persistent bytes the planner's memory model shares.
#include <ATen/ATen.h>

#include <algorithm>

#include "shardtrain/fsdp/engine.h"
#include "shardtrain/fsdp/memory_model.h"
#ifdef SHARDTRAIN_HAVE_CUDA
#include "shardtrain/cuda/device_memory.h"
#endif

namespace shardtrain::fsdp {

void FsdpEngine::note_gathered() {
  int n = 0;
  for (const auto& unit : units_) n += unit.gathered();
  peak_gathered_ = std::max(peak_gathered_, n);
  note_memory();
}

int64_t FsdpEngine::held_bytes() const {
  int64_t b = persistent_bytes_;  // fixed after construction; this runs at every gather and reduction
  const int64_t elt = c10::elementSize(cfg_.param_dtype);
  for (const auto* units : {&units_, &adapters_})
    for (const auto& u : *units) {
      if (u.gathered()) b += gathered_bytes(u.layout().padded, static_cast<int>(elt));
      if (u.grad().defined()) b += u.grad().nbytes();
    }
  b += reducer_.bytes_in_flight();
  return b;
}

void FsdpEngine::note_memory() {
  if (!device_.is_cuda()) phase_peak_ = std::max(phase_peak_, held_bytes());
}

MemoryPeaks FsdpEngine::read_and_reset_peak() {
#ifdef SHARDTRAIN_HAVE_CUDA
  if (device_.is_cuda()) {
    const auto m = cuda::device_memory(device_.index());
    cuda::reset_peak_memory(device_.index());
    return {m.peak_allocated, m.peak_reserved};
  }
#endif
  note_memory();
  const int64_t peak = phase_peak_;
  phase_peak_ = held_bytes();
  return {peak, peak};
}

int64_t FsdpEngine::take_phase_peak() { return peaks_.close_phase().allocated; }

MemoryReport FsdpEngine::memory() const {
  std::vector<UnitSize> trainable_units, base_units;
  for (size_t i = 0; i < units_.size(); ++i) {
    trainable_units.push_back(unit_size(trainable(static_cast<int64_t>(i)).layout(), units_[i].kind()));
    base_units.push_back(unit_size(units_[i].layout(), units_[i].kind()));
  }
  const PersistentBytes p = persistent_bytes(trainable_units, base_frozen() ? &base_units : nullptr, cfg_.no_sync_accumulation,
                                             static_cast<int>(c10::elementSize(cfg_.param_dtype)));
  MemoryReport m;
  m.param_bytes = p.param;
  m.grad_bytes = p.grad;
  m.optimizer_bytes = p.optimizer;
  m.no_sync_bytes = p.no_sync;
  m.base_bytes = p.base;
  m.unsharded_bytes = p.unsharded;
  m.padding_elements = p.padding_elements;
  return m;
}

}  // namespace shardtrain::fsdp
