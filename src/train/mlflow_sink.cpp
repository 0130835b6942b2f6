#include "shardtrain/train/mlflow_sink.h"

#include <chrono>
#include <set>

#include "shardtrain/runtime/version.h"
#include "shardtrain/train/metric_scalars.h"

namespace shardtrain::train {
namespace {

std::string text(const nlohmann::json& v) {
  return v.is_string() ? v.get<std::string>() : v.dump();
}

}  // namespace

obs::KeyValues mlflow_params(const RunParams& run) {
  obs::KeyValues params;
  std::set<std::string> options;
  for (const auto& [name, value] : run.options) {
    options.insert(name);
    if (name.rfind("help", 0) != 0)
      params.emplace_back(name, value);  // --help* are switches, not settings
  }
  for (const auto& [name, value] : run.values.items()) {
    std::string option =
        name;  // batch_size is --batch-size's: logged once, under the option's name
    for (char& c : option)
      if (c == '_') c = '-';
    if (!options.count(option)) params.emplace_back(name, text(value));
  }
  return params;
}

MlflowSink::MlflowSink(const obs::ObsConfig& obs, const std::string& host, int rank, int world_size,
                       const std::string& strategy, const RunParams& run) {
  obs::MlflowRunSpec spec;
  spec.uri = obs.mlflow_uri;
  spec.experiment = obs.mlflow_experiment;
  spec.run_name = obs.run_name;
  spec.params = mlflow_params(run);
  std::string command = "shardtrain train";
  for (const auto& a : run.args) command += " " + a;
  spec.tags = {{"host", host},
               {"world_size", std::to_string(world_size)},
               {"strategy", strategy},
               {"git_commit", SHARDTRAIN_GIT_COMMIT},
               {"shardtrain_version", SHARDTRAIN_VERSION},
               {"command", command},
               {"mlflow.source.name", "shardtrain"},
               {"mlflow.source.type", "JOB"},
               {"mlflow.source.git.commit",
                std::string(SHARDTRAIN_GIT_COMMIT).substr(0, 40)}};  // MLflow's: the id alone
  tracker_ = std::make_unique<obs::MlflowTracker>(std::move(spec), rank, host);
}

void MlflowSink::write(int64_t step, const std::vector<MetricScalar>& scalars) {
  held_.add(step, obs::unix_time_ms(), scalars, pending_);
}

void MlflowSink::flush() {
  held_.flush(pending_);
  if (!pending_.empty()) tracker_->log(std::move(pending_));
  pending_.clear();
}

void MlflowSink::end(obs::RunStatus status) {
  flush();
  tracker_->end(status);
}

}  // namespace shardtrain::train
