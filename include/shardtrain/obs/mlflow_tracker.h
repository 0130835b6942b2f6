// Rank 0's MLflow run, fed by the training loop without ever waiting on the server: requests go
// through a bounded queue to one background thread, which creates the run (experiment, tags,
// params), sends the metric batches and, at the end, the run's status. A server that is down or
// slow costs dropped batches and one warning a minute at most, never a stalled step.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "shardtrain/obs/mlflow_client.h"

namespace shardtrain::obs {

struct MlflowRunSpec {
  std::string uri;         // http:// or https:// tracking server
  std::string experiment;  // created when absent
  std::string run_name;    // empty: MLflow picks one
  KeyValues params;        // logged once, when the run is created
  KeyValues tags;          // set at runs/create
};

struct MlflowTrackerLimits {
  size_t queue_batches = 64;   // pending metric batches; the oldest is dropped beyond this
  double report_every_s = 60;  // failure lines: at most one per this many seconds
  double drain_s = 5;          // at the end: how long pending batches may still take
  HttpTimeouts timeouts;
};

class MlflowTracker {
 public:
  // rank and host name the helper thread in its failure line. Returns at once: the run is
  // created by the thread.
  MlflowTracker(MlflowRunSpec spec, int rank, std::string host, MlflowTrackerLimits limits = {});
  ~MlflowTracker();  // end(kFailed) unless ended: an exception is unwinding the run
  MlflowTracker(const MlflowTracker&) = delete;
  MlflowTracker& operator=(const MlflowTracker&) = delete;

  // Queues one batch (one logging interval's metrics); never blocks on the server.
  void log(std::vector<MlflowMetric> batch);
  // Sends what is queued (for drain_s at most), then the status with the end time; joins the
  // thread. Later calls do nothing.
  void end(RunStatus status);

 private:
  using Clock = std::chrono::steady_clock;
  void run();         // the thread's body
  bool ensure_run();  // experiment, run and params; false: failed (counted)
  void send(const std::vector<MlflowMetric>& batch);
  void failed(const std::string& error);  // counts a failed request
  void report(bool final);                // the failure line, when due

  MlflowRunSpec spec_;
  int rank_;
  std::string host_;
  MlflowTrackerLimits limits_;
  MlflowClient client_;
  int64_t start_ms_;    // the run's start time
  std::string run_id_;  // the thread's: empty until runs/create succeeded
  bool params_logged_ = false;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::vector<MlflowMetric>> queue_;
  bool ending_ = false;
  RunStatus status_ = RunStatus::kFailed;
  Clock::time_point drain_until_;
  int64_t dropped_batches_ = 0;  // queue full, or left at the end (under mu_)

  // The thread's failure counts since the last report.
  int64_t failed_requests_ = 0, reported_dropped_ = 0;
  std::string last_error_;
  Clock::time_point last_report_{};
  bool reported_once_ = false;

  std::thread thread_;
};

}  // namespace shardtrain::obs
