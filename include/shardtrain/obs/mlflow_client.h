// MLflow's tracking REST API (api/2.0/mlflow): the calls a training run makes, one blocking
// request each, and the pure pieces (request bodies within MLflow's limits, key rules, URI check).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>
#include "shardtrain/obs/run_status.h"

#include "shardtrain/obs/http_client.h"

namespace shardtrain::obs {

using KeyValues = std::vector<std::pair<std::string, std::string>>;

struct MlflowMetric {
  std::string key;
  double value = 0;
  int64_t timestamp_ms = 0;  // Unix time
  int64_t step = 0;
};

int64_t unix_time_ms();                    // MLflow's timestamps: milliseconds since the epoch
const char* run_status_name(RunStatus s);  // MLflow's RunStatus: FINISHED, FAILED, KILLED

// MLflow's own limits (mlflow/utils/validation.py), which the server enforces per request.
inline constexpr size_t kMlflowMaxMetricsPerBatch = 1000;
inline constexpr size_t kMlflowMaxParamsTagsPerBatch = 100;
inline constexpr size_t kMlflowMaxEntitiesPerBatch = 1000;
inline constexpr size_t kMlflowMaxKeyLength = 250;
inline constexpr size_t kMlflowMaxParamValueLength = 6000;
inline constexpr size_t kMlflowMaxTagValueLength = 8000;

// A key MLflow accepts: characters outside letters, digits and _ - . / : space become '_', no
// leading '/', no empty or ".." path parts, at most 250 characters.
std::string mlflow_key(const std::string& key);

// log-batch bodies holding every metric, param and tag in order, each within MLflow's limits;
// keys through mlflow_key, values cut to MLflow's lengths, non-finite metrics as "NaN"/"Infinity".
std::vector<nlohmann::json> log_batch_bodies(const std::string& run_id,
                                             const std::vector<MlflowMetric>& metrics,
                                             const KeyValues& params = {},
                                             const KeyValues& tags = {});

// --mlflow-uri: an http:// or https:// tracking server; throws UsageError otherwise (file: URIs and
// bare paths are MLflow's local store, which has no REST API).
void check_mlflow_uri(const std::string& uri);

// A REST call answered with an error (MLflow's error_code and message), or an unreadable answer.
class MlflowError : public runtime::Error {
 public:
  MlflowError(const std::string& what, long status, std::string error_code)
      : runtime::Error(what), status_(status), error_code_(std::move(error_code)) {}
  long status() const { return status_; }
  const std::string& error_code() const { return error_code_; }

 private:
  long status_;
  std::string error_code_;
};

class MlflowClient {
 public:
  // Credentials as MLflow's own client reads them: $MLFLOW_TRACKING_TOKEN, else
  // $MLFLOW_TRACKING_USERNAME and $MLFLOW_TRACKING_PASSWORD.
  MlflowClient(const std::string& uri, HttpTimeouts timeouts);
  std::string experiment_id(
      const std::string& name);  // experiments/get-by-name, created when absent
  // runs/create; run_name empty: MLflow picks one. Returns the run id.
  std::string create_run(const std::string& experiment_id, const std::string& run_name,
                         int64_t start_ms, const KeyValues& tags);
  void log_batch(const nlohmann::json& body);  // runs/log-batch, one of log_batch_bodies()
  void update_run(const std::string& run_id, RunStatus status, int64_t end_ms);  // runs/update
  const std::string& uri() const { return http_.base_url(); }

 private:
  nlohmann::json call(const std::string& path,
                      const nlohmann::json* body);  // GET when body is null

  HttpClient http_;
};

}  // namespace shardtrain::obs
