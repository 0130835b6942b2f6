// --profile-step N: LibTorch's (Kineto) profiler around optimizer step N, host ops and, on a GPU,
// CUDA kernels. Each rank writes its Chrome trace (chrome://tracing, Perfetto) and the summary
// of train/profile_summary.h; rank 0 prints the summary.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

namespace shardtrain::train {

class StepProfiler {
 public:
  StepProfiler(int64_t step, std::string dir, int rank, bool cuda);  // step 0: off
  ~StepProfiler();
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;
  void begin(int64_t step);  // before step `step` (1-based): starts when it is the profiled one
  void end(int64_t step);  // after it: stops, writes DIR/trace-rankR.json and DIR/profile-rankR.md

 private:
  int64_t step_;
  std::string dir_;
  int rank_;
  bool cuda_, active_ = false;
};

// The name of the range fit() puts around the gradient clip and the optimizer step.
inline constexpr const char* kOptimizerRange = "shardtrain::optimizer";

}  // namespace shardtrain::train
