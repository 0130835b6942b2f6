// A run tracker the metrics publisher feeds on rank 0 (--tensorboard, --mlflow-uri): every
// metrics line, a flush at each progress line and at the run's end, and how the run ended.
#pragma once
#include <nlohmann/json.hpp>

#include "shardtrain/obs/run_status.h"

namespace shardtrain::train {

class TrackerSink {
 public:
  virtual ~TrackerSink() = default;
  virtual void write(const nlohmann::json& line) = 0;  // one metrics_line(): its scalars at its step, buffered
  virtual void flush() = 0;                            // at each progress line and the run's end
  virtual void end(obs::RunStatus status) = 0;         // the run's end, flushed
};

}  // namespace shardtrain::train
