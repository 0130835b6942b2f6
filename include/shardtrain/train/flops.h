// Model FLOPs per token and peak throughput, for MFU (docs/metrics.md).
#pragma once
#include <cstdint>
#include <string>

#include "shardtrain/model/config.h"

namespace shardtrain {

// 6·N + 12·L·H·Q·T (torchtitan, llm-foundry): N = parameters excluding the input embedding,
// L layers, H heads, Q head dim, T sequence length. Covers forward + backward.
double flops_per_token(const ModelConfig& cfg, int64_t seq_len);

// Dense bf16 peak in TFLOP/s for a device name (H100 SXM 989, A100 312); 0 when unknown.
double peak_tflops_for_device(const std::string& device_name);

// The peak MFU divides by: --peak-tflops when > 0, else the device table, else a nominal
// 1 TFLOP/s for CPUs and unknown devices (docs/metrics.md).
constexpr double kNominalCpuPeakTflops = 1.0;
double resolve_peak_tflops(double option, const std::string& device_name);

}  // namespace shardtrain
