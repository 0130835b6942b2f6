// The scalars of one metrics line, as the experiment trackers (TensorBoard, MLflow) log them.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace shardtrain::train {

struct MetricScalar {
  std::string tag;  // the key path, nested keys joined by '/': "phases/forward",
                    // "comm/world/all_reduce/bytes"
  double value = 0;
};

// Every numeric leaf of a metrics_line() object, in the object's key order (array elements
// tagged by index), except the top-level "step", which the trackers take as their step. Strings,
// booleans and nulls are left out.
std::vector<MetricScalar> metric_scalars(const nlohmann::json& line);

}  // namespace shardtrain::train
