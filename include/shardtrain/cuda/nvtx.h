// NVTX ranges for Nsight Systems (nsys profile): units and collectives show on the timeline.
// In GPU builds NVTX 3 is header-only and costs nothing unless a profiler is attached; CPU
// builds compile the ranges away.
#pragma once
#include <string>

#ifdef SHARDTRAIN_HAVE_CUDA
#include <nvtx3/nvToolsExt.h>
#endif

namespace shardtrain::cuda {

class NvtxRange {
 public:
#ifdef SHARDTRAIN_HAVE_CUDA
  explicit NvtxRange(const char* name) { nvtxRangePushA(name); }
  explicit NvtxRange(const std::string& name) { nvtxRangePushA(name.c_str()); }
  ~NvtxRange() { nvtxRangePop(); }
#else
  explicit NvtxRange(const char*) {}
  explicit NvtxRange(const std::string&) {}
#endif
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};

}  // namespace shardtrain::cuda
