#include "shardtrain/train/flops.h"

namespace shardtrain {

double flops_per_token(const ModelConfig& c, int64_t seq_len) {
  const double n = static_cast<double>(c.num_params() - c.num_embedding_params());
  return 6.0 * n + 12.0 * c.num_layers * c.num_heads * c.head_dim() * static_cast<double>(seq_len);
}

double peak_tflops_for_device(const std::string& name) {
  auto has = [&](const char* s) { return name.find(s) != std::string::npos; };
  if (has("H200") || has("H100")) return 989.0;  // SXM dense bf16
  if (has("A100")) return 312.0;
  return 0.0;
}

double resolve_peak_tflops(double option, const std::string& device_name) {
  if (option > 0) return option;
  const double table = peak_tflops_for_device(device_name);
  return table > 0 ? table : kNominalCpuPeakTflops;
}

}  // namespace shardtrain
