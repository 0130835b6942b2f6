#include "shardtrain/obs/mlflow_tracker.h"

#include <pthread.h>

#include <csignal>
#include <utility>

#include "shardtrain/runtime/logging.h"
#include "shardtrain/runtime/mpi_env.h"

namespace shardtrain::obs {
MlflowTracker::MlflowTracker(MlflowRunSpec spec, int rank, std::string host,
                             MlflowTrackerLimits limits)
    : spec_(std::move(spec)),
      rank_(rank),
      host_(std::move(host)),
      limits_(limits),
      client_(spec_.uri, limits.timeouts),
      start_ms_(unix_time_ms()) {
  thread_ = std::thread(
      [this] { runtime::run_helper_thread("MLflow tracker", rank_, host_, 1, [this] { run(); }); });
}

MlflowTracker::~MlflowTracker() {
  try {
    end(RunStatus::kFailed);
  } catch (...) {  // a destructor: the thread's own failures are already counted and reported
  }
}

void MlflowTracker::log(std::vector<MlflowMetric> batch) {
  if (batch.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (ending_) return;
    if (queue_.size() >= limits_.queue_batches) {  // a slow server: the newest figures matter most
      queue_.pop_front();
      ++dropped_batches_;
    }
    queue_.push_back(std::move(batch));
  }
  cv_.notify_one();
}

void MlflowTracker::end(RunStatus status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!ending_) {
      ending_ = true;
      status_ = status;
      drain_until_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(limits_.drain_s));
    }
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void MlflowTracker::run() {
  sigset_t pipe;  // an https server closing mid-write: EPIPE for this thread, not a SIGPIPE that
                  // ends the process
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe, nullptr);
  ensure_run();  // at once, so that the params and tags are there before the first metrics
  report(false);
  RunStatus status;
  for (;;) {
    std::vector<MlflowMetric> batch;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::duration<double>(limits_.report_every_s),
                   [&] { return ending_ || !queue_.empty(); });
      if (ending_ && (queue_.empty() || Clock::now() >= drain_until_)) {
        dropped_batches_ += static_cast<int64_t>(queue_.size());  // past the drain's deadline
        queue_.clear();
        status = status_;
        break;
      }
      if (!queue_.empty()) {
        batch = std::move(queue_.front());
        queue_.pop_front();
      }
    }
    if (!batch.empty()) send(batch);
    report(false);
  }
  const bool time_left = Clock::now() < drain_until_;
  if (run_id_.empty() && time_left) ensure_run();  // the server may have come up since
  if (!run_id_.empty()) {
    try {
      client_.update_run(run_id_, status, unix_time_ms());
    } catch (const std::exception& e) {
      failed(std::string("the run's status ") + run_status_name(status) +
             " was not sent: " + e.what());
    }
  } else {
    failed(std::string("the run was never created, so its status ") + run_status_name(status) +
           " was not sent");
  }
  report(true);
}

bool MlflowTracker::ensure_run() {
  try {
    if (run_id_.empty()) {
      const std::string experiment = client_.experiment_id(spec_.experiment);
      run_id_ = client_.create_run(experiment, spec_.run_name, start_ms_, spec_.tags);
      runtime::log::info("MLflow: run " + run_id_ + " in experiment '" + spec_.experiment + "' (" +
                         experiment + ") at " + client_.uri() + "/#/experiments/" + experiment +
                         "/runs/" + run_id_);
    }
    if (!params_logged_) {
      for (const auto& body : log_batch_bodies(run_id_, {}, spec_.params)) client_.log_batch(body);
      params_logged_ = true;
    }
    return true;
  } catch (const std::exception& e) {
    failed(e.what());
    return false;
  }
}

void MlflowTracker::send(const std::vector<MlflowMetric>& batch) {
  if (!ensure_run()) {
    std::lock_guard<std::mutex> lock(mu_);
    ++dropped_batches_;  // no run to log it to
    return;
  }
  for (const auto& body : log_batch_bodies(run_id_, batch)) {
    try {
      client_.log_batch(body);
    } catch (const std::exception& e) {
      failed(e.what());
    }
  }
}

void MlflowTracker::failed(const std::string& error) {
  ++failed_requests_;
  last_error_ = error;
}

void MlflowTracker::report(bool final) {
  int64_t dropped = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    dropped = dropped_batches_;
  }
  const int64_t new_dropped = dropped - reported_dropped_;
  if (failed_requests_ == 0 && new_dropped == 0) return;
  const auto now = Clock::now();
  if (!final && reported_once_ &&
      now - last_report_ < std::chrono::duration<double>(limits_.report_every_s))
    return;
  std::string line = "MLflow at " + client_.uri() + ": " + std::to_string(failed_requests_) +
                     (failed_requests_ == 1 ? " request" : " requests") + " failed and " +
                     std::to_string(new_dropped) +
                     (new_dropped == 1 ? " metric batch was" : " metric batches were") +
                     " dropped since " + (reported_once_ ? "the last report" : "the run started");
  if (!last_error_.empty()) line += "; last error: " + last_error_;
  if (!final)
    line += "; training goes on (the next such line in " +
            std::to_string(static_cast<int>(limits_.report_every_s)) + " s at the earliest)";
  runtime::log::warn(line);
  failed_requests_ = 0;
  reported_dropped_ = dropped;
  last_report_ = now;
  reported_once_ = true;
}

}  // namespace shardtrain::obs
