// The points of a metrics line that MLflow needs. MLflow stores every point in its database and
// most of a line holds still from step to step (memory, collective counts), so a series' point is
// sent where its value changes, with the point before a change (a chart then draws a step, not a
// ramp), and every held-back latest point at each flush: for every step of the line's series,
// MLflow's latest point at or before that step is that step's value.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "shardtrain/obs/mlflow_client.h"
#include "shardtrain/train/metric_scalars.h"

namespace shardtrain::train {

class HeldPoints {
 public:
  // Appends to out the points of one line (taken at time_ms) that must be sent.
  void add(int64_t step, int64_t time_ms, const std::vector<MetricScalar>& scalars,
           std::vector<obs::MlflowMetric>& out);
  // Appends each series' latest point that was held back.
  void flush(std::vector<obs::MlflowMetric>& out);

 private:
  struct Series {
    double value;
    int64_t step;     // the latest line that held the series
    int64_t time_ms;  // that line's time
    bool sent;        // that point was sent
  };
  std::map<std::string, Series> series_;
};

}  // namespace shardtrain::train
