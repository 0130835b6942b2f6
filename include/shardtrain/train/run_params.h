// What the experiment trackers (TensorBoard, MLflow) record about a run besides its figures.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace shardtrain::train {

struct RunParams {
  nlohmann::json values =
      nlohmann::json::object();   // flat: setting -> number, string or bool (the hyper-parameters)
  std::vector<std::string> args;  // the command line as given
  std::vector<std::pair<std::string, std::string>>
      options;  // every option's value, typed or default (MLflow's params)
};

}  // namespace shardtrain::train
