// The map of one profiled step (--profile-step): the top kernels by time and the share of the
// step spent in GEMM, attention, elementwise ops, the optimizer, communication and launch gaps.
// Pure: it works on events already taken from the profiler (train/step_profiler.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace shardtrain::train {

enum class KernelKind {
  kGemm,
  kAttention,
  kElementwise,
  kOptimizer,
  kCommunication,
  kMemory,
  kCount
};
const char* kernel_kind_name(KernelKind k);
// By name alone: cuBLAS/CUTLASS/nvjet and aten::mm-like ops are GEMM, flash/fmha/sdpa attention,
// nccl/c10d communication, memcpy/memset/copy_ memory, adam optimizer, the rest elementwise.
KernelKind kind_by_name(const std::string& name);

struct ProfileEvent {
  std::string name;
  int64_t start_ns = 0, end_ns = 0;
  int64_t launch_ns = -1;  // a device kernel's launch on the host (its runtime call); -1: unknown
  uint64_t thread = 0;     // host ops: nesting is per thread
  bool device = false;     // a GPU kernel, memcpy or memset; else a host op
};

struct KernelTotal {
  std::string name;
  KernelKind kind = KernelKind::kElementwise;
  int64_t calls = 0, ns = 0;
};

struct ProfileSummary {
  bool device = false;  // the work is GPU kernels; else the host's ops (a CPU run)
  int64_t span_ns = 0;  // first work item's start to the last one's end
  int64_t busy_ns = 0;  // the union of the work items: span - busy is launch gaps
  int64_t items = 0;
  int64_t kind_ns[static_cast<int>(KernelKind::kCount)] =
      {};                        // summed own times (streams may overlap)
  std::vector<KernelTotal> top;  // by total time, longest first
  double share(KernelKind k) const {
    return span_ns ? double(kind_ns[static_cast<int>(k)]) / span_ns : 0;
  }
  double gap_share() const { return span_ns ? double(span_ns - busy_ns) / span_ns : 0; }
};

// Work items: the device events if there are any, else the host ops, each counted for its own
// time (less the ops nested in it on its thread). An item is the optimizer's when it runs in
// (device) or was launched in (host) one of optimizer_ranges, given as [start, end) pairs.
ProfileSummary summarize_profile(
    const std::vector<ProfileEvent>& events,
    const std::vector<std::pair<int64_t, int64_t>>& optimizer_ranges,
    const std::vector<std::pair<int64_t, int64_t>>& device_optimizer_ranges, size_t top_n);

// Markdown: a header line, the shares table and the top kernels table.
std::string format_profile(const ProfileSummary& s, int64_t step, const std::string& what);

}  // namespace shardtrain::train
