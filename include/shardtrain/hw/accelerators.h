// The accelerators shardtrain knows: dense bf16 peak, memory and memory bandwidth, in one table
// that MFU (train) and the planner (plan) both read. Published figures and their sources are in
// docs/planner.md.
#pragma once
#include <string>
#include <vector>

namespace shardtrain::hw {

struct GpuSpec {
  std::string name;         // the planner's --gpu name
  double peak_tflops = 0;   // dense bf16
  double memory_bytes = 0;  // per GPU
  double hbm_gbps = 0;      // memory bandwidth, GB/s: the optimizer step is bound by it
  double fp8_tflops = 0;    // dense float8 peak; 0: no float8 tensor cores
};

// h100-80gb, h200-141gb, a100-80gb, a100-40gb; "cpu" (hidden) for the planner's validation on a
// CPU machine. Throws UsageError naming --gpu otherwise.
GpuSpec gpu_spec(const std::string& name);
std::vector<std::string> gpu_names();

// Dense bf16 peak in TFLOP/s for a CUDA device name ("NVIDIA H100 80GB HBM3"); 0 when unknown.
double peak_tflops_for_device(const std::string& device_name);

// The peak MFU divides by: --peak-tflops when > 0, else the device table, else a nominal
// 1 TFLOP/s for CPUs and unknown devices (docs/metrics.md).
constexpr double kNominalCpuPeakTflops = 1.0;
double resolve_peak_tflops(double option, const std::string& device_name);

}  // namespace shardtrain::hw
