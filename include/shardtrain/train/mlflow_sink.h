// The metrics publisher's --mlflow-uri sink (rank 0): the run's params and tags at its start,
// the metrics lines' scalars (HeldPoints: the points that carry every step's value; one batch per
// progress line), and its final status.
// Every request goes through obs::MlflowTracker's queue: the server never holds up a step.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "shardtrain/obs/config.h"
#include "shardtrain/obs/mlflow_tracker.h"
#include "shardtrain/train/held_points.h"
#include "shardtrain/train/run_params.h"
#include "shardtrain/train/tracker_sink.h"

namespace shardtrain::train {

// MLflow's params of a run: every option's value, then the settled figures (global_batch,
// num_params, ...) that no option names.
obs::KeyValues mlflow_params(const RunParams& run);

class MlflowSink : public TrackerSink {
 public:
  // The run is created in the background, named obs.run_name, in obs.mlflow_experiment.
  MlflowSink(const obs::ObsConfig& obs, const std::string& host, int rank, int world_size,
             const std::string& strategy, const RunParams& run);
  void write(int64_t step, const std::vector<MetricScalar>& scalars) override;
  void flush() override;  // queues the buffered scalars as one batch
  void end(
      obs::RunStatus status) override;  // flush, then the tracker's bounded drain and the status

 private:
  HeldPoints held_;
  std::vector<obs::MlflowMetric> pending_;
  std::unique_ptr<obs::MlflowTracker> tracker_;
};

}  // namespace shardtrain::train
