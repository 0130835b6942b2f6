#include "shardtrain/train/metric_scalars.h"

namespace shardtrain::train {
namespace {

void collect(const nlohmann::json& node, const std::string& tag, std::vector<MetricScalar>& out) {
  if (node.is_number()) {  // is_number is false for booleans: a flag is not a figure
    out.push_back({tag, node.get<double>()});
  } else if (node.is_object()) {
    for (const auto& [key, child] : node.items())
      collect(child, tag.empty() ? key : tag + "/" + key, out);
  } else if (node.is_array()) {
    for (size_t i = 0; i < node.size(); ++i) collect(node[i], tag + "/" + std::to_string(i), out);
  }
}

}  // namespace

std::vector<MetricScalar> metric_scalars(const nlohmann::json& line) {
  std::vector<MetricScalar> out;
  if (!line.is_object()) return out;
  for (const auto& [key, child] : line.items())
    if (key != "step") collect(child, key, out);
  return out;
}

}  // namespace shardtrain::train
