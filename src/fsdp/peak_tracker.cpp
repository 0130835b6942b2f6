#include "shardtrain/fsdp/peak_tracker.h"

#include <algorithm>

namespace shardtrain::fsdp {

MemoryPeaks max_of(const MemoryPeaks& a, const MemoryPeaks& b) {
  return {std::max(a.allocated, b.allocated), std::max(a.reserved, b.reserved)};
}

MemoryPeaks PeakTracker::close_phase() {
  const MemoryPeaks p = take_();
  step_ = max_of(step_, p);
  run_ = max_of(run_, p);
  return p;
}

void PeakTracker::discard() { take_(); }

MemoryPeaks PeakTracker::end_step() {
  const MemoryPeaks s = step_;
  step_ = MemoryPeaks{};
  return s;
}

}  // namespace shardtrain::fsdp
