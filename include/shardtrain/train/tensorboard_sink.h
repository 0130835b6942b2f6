// The metrics publisher's --tensorboard sink (rank 0): every metrics line's scalars at its step,
// and once per process the run's configuration (text plugin) and hyper-parameters (HParams).
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "shardtrain/obs/tensorboard_writer.h"
#include "shardtrain/train/run_params.h"
#include "shardtrain/train/tracker_sink.h"

namespace shardtrain::train {

class TensorBoardSink : public TrackerSink {
 public:
  // A new event file in dir/run_name/. start_step: 0, or the step a resumed run continues from;
  // TensorBoard drops what the run's earlier files logged after it (the steps redone).
  TensorBoardSink(const std::string& dir, const std::string& run_name, const std::string& host,
                  int64_t start_step, const RunParams& run);
  void write(int64_t step, const std::vector<MetricScalar>& scalars) override;
  void flush() override;
  // The HParams session's end at the last step written; a signal's stop (kKilled) leaves it open:
  // the resume continues it.
  void end(obs::RunStatus status) override;
  const std::string& path() const { return path_; }

 private:
  void check(bool ok);  // a failed write warns once and ends the sink: training goes on
  std::unique_ptr<obs::TensorBoardWriter> writer_;
  std::string path_;
  int64_t last_step_ = 0;
};

// The text plugin's page of a run: its command line and settings as a markdown table.
std::string config_markdown(const RunParams& run);

}  // namespace shardtrain::train
