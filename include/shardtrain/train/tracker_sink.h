// A run tracker the metrics publisher feeds on rank 0 (--tensorboard, --mlflow-uri): every
// metrics line, a flush at each progress line and at the run's end, and how the run ended.
#pragma once
#include <cstdint>
#include <vector>

#include "shardtrain/obs/run_status.h"
#include "shardtrain/train/metric_scalars.h"

namespace shardtrain::train {

class TrackerSink {
 public:
  virtual ~TrackerSink() = default;
  // One metrics line's scalars (metric_scalars(), computed once for every tracker) at its step,
  // buffered.
  virtual void write(int64_t step, const std::vector<MetricScalar>& scalars) = 0;
  virtual void flush() = 0;                     // at each progress line and the run's end
  virtual void end(obs::RunStatus status) = 0;  // the run's end, flushed
};

}  // namespace shardtrain::train
