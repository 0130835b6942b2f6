// The metrics-publisher component: per-step figures (throughput, MFU, memory, collectives),
// the JSONL line (rank 0), progress and cross-rank breakdown lines, the Prometheus endpoint and
// the TensorBoard event file and the MLflow run (rank 0). A new figure goes in measure(); a new
// sink goes in publish().
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "shardtrain/fsdp/engine.h"
#include "shardtrain/obs/config.h"
#include "shardtrain/obs/node_exporter.h"
#include "shardtrain/obs/run_status.h"
#include "shardtrain/runtime/mpi_env.h"
#include "shardtrain/train/config.h"
#include "shardtrain/train/metrics.h"
#include "shardtrain/train/run_params.h"
#include "shardtrain/train/tracker_sink.h"

namespace shardtrain::train {

class MetricsPublisher {
 public:
  // Collective over the world (the exporter's node communicator). start_step: a resumed run
  // keeps its metrics file's lines up to there. run: the settings the trackers record.
  MetricsPublisher(const TrainConfig& cfg, const obs::ObsConfig& obs, fsdp::FsdpEngine& engine,
                   comm::ParallelDims& dims, const runtime::MpiEnv& env,
                   std::vector<std::string> hosts, int64_t seq_len, int64_t start_step,
                   const RunParams& run);
  void begin_step();  // zeroes the collectives' per-step counts
  // After the step's compute is queued: its memory and collectives.
  void measure(StepMetrics& m, int64_t global_rows);
  // Once the device has finished the step (its loss read on the host): its time, and the
  // throughput from it.
  void timed(StepMetrics& m, double step_time_s);
  // Collective on log steps (the cross-rank breakdown): the line, the logs, Prometheus. The
  // breakdown is printed every --breakdown-every progress lines and when the run ends.
  // checkpoint_s: the save's duration, or 0 when this step saved nothing.
  void publish(StepMetrics& m, bool log_step, bool run_ends, int64_t total_steps,
               double checkpoint_s);
  void write_initial(const StepMetrics& m);  // the step-0 validation line, before training
  // The run's end as the trackers record it (MLflow: FINISHED, FAILED or KILLED). Without this
  // call, the destructor records FAILED: an exception is unwinding the run.
  void end_run(obs::RunStatus status);
  // The endpoint serves every step's figures: the loop reads them from the device each step.
  bool wants_every_step() const { return exporter_ != nullptr; }

 private:
  TrainConfig cfg_;
  fsdp::FsdpEngine& engine_;
  comm::ParallelDims& dims_;
  const runtime::MpiEnv& env_;
  std::vector<std::string> hosts_;
  int64_t seq_len_;
  double flops_per_token_;
  int64_t start_step_;
  double timed_s_ = 0;  // this run's step + checkpoint time, for the ETA
  double last_checkpoint_s_ = 0;
  IntervalThroughput interval_;  // the steps since the last progress line, for its tokens/s
  int64_t log_steps_ = 0;        // progress steps so far, for --breakdown-every
  std::pair<double, double> gpu_peaks_{-1, -1};  // allocated, reserved; -1 on a CPU rank
  MetricsWriter writer_;
  std::unique_ptr<obs::NodeExporter> exporter_;
  std::vector<std::unique_ptr<TrackerSink>> trackers_;  // rank 0: --tensorboard, --mlflow-uri
  obs::RankSeries series_;  // collective counters accumulate across steps
};

}  // namespace shardtrain::train
