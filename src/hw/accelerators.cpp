#include "shardtrain/hw/accelerators.h"

#include "shardtrain/runtime/error.h"

namespace shardtrain::hw {

namespace {
struct Row {
  GpuSpec spec;
  const char* device_match;  // a substring of the CUDA device name
};

// SXM parts; the first row whose device_match a device name contains gives its peak.
const std::vector<Row>& table() {
  static const std::vector<Row> rows = {
      {{"h100-80gb", 989, 80e9, 3350, 1979}, "H100"},
      {{"h200-141gb", 989, 141e9, 4800, 1979}, "H200"},
      {{"a100-80gb", 312, 80e9, 2039}, "A100"},
      {{"a100-40gb", 312, 40e9, 1555}, "A100"},
  };
  return rows;
}
}  // namespace

GpuSpec gpu_spec(const std::string& name) {
  for (const auto& r : table())
    if (r.spec.name == name) return r.spec;
  if (name == "cpu")
    return {name, 1, 0, 0};  // memory and bandwidth: from --gpu-memory and --calibrate
  std::string names;
  for (const auto& n : gpu_names()) names += (names.empty() ? "" : ", ") + n;
  throw runtime::UsageError("--gpu '" + name + "' is unknown; use one of " + names);
}

std::vector<std::string> gpu_names() {
  std::vector<std::string> n;
  for (const auto& r : table()) n.push_back(r.spec.name);
  return n;
}

double peak_tflops_for_device(const std::string& device_name) {
  for (const auto& r : table())
    if (device_name.find(r.device_match) != std::string::npos) return r.spec.peak_tflops;
  return 0.0;
}

double resolve_peak_tflops(double option, const std::string& device_name) {
  if (option > 0) return option;
  const double from_table = peak_tflops_for_device(device_name);
  return from_table > 0 ? from_table : kNominalCpuPeakTflops;
}

}  // namespace shardtrain::hw
