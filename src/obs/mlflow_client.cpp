#include "shardtrain/obs/mlflow_client.h"

#include <chrono>

#include <cctype>
#include <cmath>
#include <cstdlib>

namespace shardtrain::obs {
namespace {

constexpr const char* kApi = "/api/2.0/mlflow";
constexpr size_t kMaxBodyBytes = 900 * 1000;  // MLflow refuses a log-batch request over 1 MB

std::string cut(const std::string& s, size_t n) { return s.size() <= n ? s : s.substr(0, n); }

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

nlohmann::json metric_value(
    double v) {  // JSON has no NaN or Infinity: protobuf's JSON spells them as strings
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  return v;
}

// MLflow refuses a key that a path normalization would change: no "", "." or ".." parts.
std::string path_parts(const std::string& key) {
  std::string out;
  size_t start = 0;
  while (start <= key.size()) {
    size_t end = key.find('/', start);
    if (end == std::string::npos) end = key.size();
    std::string part = key.substr(start, end - start);
    if (part == "..") part = "__";
    if (!part.empty() && part != ".") out += (out.empty() ? "" : "/") + part;
    start = end + 1;
  }
  return out;
}

}  // namespace

int64_t unix_time_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

const char* run_status_name(RunStatus s) {
  switch (s) {
    case RunStatus::kFinished:
      return "FINISHED";
    case RunStatus::kFailed:
      return "FAILED";
    case RunStatus::kKilled:
      return "KILLED";
  }
  return "FAILED";
}

std::string mlflow_key(const std::string& key) {
  std::string clean;
  for (char c : key) {
    const bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' ||
                    c == '.' || c == '/' || c == ':' || c == ' ';
    clean += ok ? c : '_';
  }
  const std::string out = path_parts(cut(path_parts(clean), kMlflowMaxKeyLength));
  return out.empty() ? "_" : out;
}

std::vector<nlohmann::json> log_batch_bodies(const std::string& run_id,
                                             const std::vector<MlflowMetric>& metrics,
                                             const KeyValues& params, const KeyValues& tags) {
  std::vector<nlohmann::json> bodies;
  nlohmann::json body;
  size_t n_metrics = 0, n_params = 0, n_tags = 0, bytes = 0;
  auto add = [&](const char* field, nlohmann::json item, size_t& count, size_t limit) {
    const size_t item_bytes = item.dump().size() + 1;
    const bool full = count >= limit ||
                      n_metrics + n_params + n_tags >= kMlflowMaxEntitiesPerBatch ||
                      bytes + item_bytes > kMaxBodyBytes;
    if (body.is_null() || full) {
      if (!body.is_null()) bodies.push_back(std::move(body));
      body = {{"run_id", run_id}};
      n_tags = 0;
      n_params = n_tags;
      n_metrics = n_tags;
      bytes = 64 + run_id.size();
    }
    body[field].push_back(std::move(item));
    ++count;
    bytes += item_bytes;
  };
  for (const auto& [k, v] : params)
    add("params", {{"key", mlflow_key(k)}, {"value", cut(v, kMlflowMaxParamValueLength)}}, n_params,
        kMlflowMaxParamsTagsPerBatch);
  for (const auto& [k, v] : tags)
    add("tags", {{"key", mlflow_key(k)}, {"value", cut(v, kMlflowMaxTagValueLength)}}, n_tags,
        kMlflowMaxParamsTagsPerBatch);
  for (const auto& m : metrics)
    add("metrics",
        {{"key", mlflow_key(m.key)},
         {"value", metric_value(m.value)},
         {"timestamp", m.timestamp_ms},
         {"step", m.step}},
        n_metrics, kMlflowMaxMetricsPerBatch);
  if (!body.is_null()) bodies.push_back(std::move(body));
  return bodies;
}

void check_mlflow_uri(const std::string& uri) {
  if (uri.empty()) return;
  const bool http = uri.rfind("http://", 0) == 0 && uri.size() > 7;
  const bool https = uri.rfind("https://", 0) == 0 && uri.size() > 8;
  if (http || https) return;
  throw runtime::UsageError("--mlflow-uri '" + uri +
                            "' is not an http:// or https:// tracking server; start one with "
                            "`mlflow server --backend-store-uri sqlite:///mlflow.db --host "
                            "127.0.0.1 --port 5000` and pass "
                            "--mlflow-uri http://127.0.0.1:5000");
}

MlflowClient::MlflowClient(const std::string& uri, HttpTimeouts timeouts)
    : http_(uri.back() == '/' ? uri.substr(0, uri.size() - 1) : uri, timeouts,
            env("MLFLOW_TRACKING_TOKEN"), env("MLFLOW_TRACKING_USERNAME"),
            env("MLFLOW_TRACKING_PASSWORD")) {}

nlohmann::json MlflowClient::call(const std::string& path, const nlohmann::json* body) {
  const HttpResponse r = body ? http_.post_json(kApi + path, body->dump()) : http_.get(kApi + path);
  const auto j = nlohmann::json::parse(r.body, nullptr, /*allow_exceptions=*/false);
  if (r.status == 200 && j.is_object()) return j;
  std::string code, message;
  if (j.is_object()) {
    code = j.value("error_code", "");
    message = j.value("message", "");
  }
  if (message.empty()) message = cut(r.body, 200);
  throw MlflowError(path + ": HTTP " + std::to_string(r.status) + (code.empty() ? "" : " " + code) +
                        ": " + message,
                    r.status, code);
}

std::string MlflowClient::experiment_id(const std::string& name) {
  try {
    return call("/experiments/get-by-name?experiment_name=" + url_encode(name),
                nullptr)["experiment"]["experiment_id"];
  } catch (const MlflowError& e) {
    if (e.error_code() != "RESOURCE_DOES_NOT_EXIST") throw;
  }
  const nlohmann::json req = {{"name", name}};
  try {
    return call("/experiments/create", &req)["experiment_id"];
  } catch (const MlflowError& e) {  // another job created it in between
    if (e.error_code() != "RESOURCE_ALREADY_EXISTS") throw;
  }
  return call("/experiments/get-by-name?experiment_name=" + url_encode(name),
              nullptr)["experiment"]["experiment_id"];
}

std::string MlflowClient::create_run(const std::string& experiment_id, const std::string& run_name,
                                     int64_t start_ms, const KeyValues& tags) {
  nlohmann::json req = {{"experiment_id", experiment_id},
                        {"start_time", start_ms},
                        {"tags", nlohmann::json::array()}};
  if (!run_name.empty()) req["run_name"] = run_name;
  for (const auto& [k, v] : tags)
    req["tags"].push_back({{"key", mlflow_key(k)}, {"value", cut(v, kMlflowMaxTagValueLength)}});
  const nlohmann::json r = call("/runs/create", &req);
  const std::string id = r.value("/run/info/run_id"_json_pointer, std::string());
  if (id.empty())
    throw MlflowError("/runs/create: the answer holds no run id: " + cut(r.dump(), 200), 200, "");
  return id;
}

void MlflowClient::log_batch(const nlohmann::json& body) { call("/runs/log-batch", &body); }

void MlflowClient::update_run(const std::string& run_id, RunStatus status, int64_t end_ms) {
  const nlohmann::json req = {
      {"run_id", run_id}, {"status", run_status_name(status)}, {"end_time", end_ms}};
  call("/runs/update", &req);
}

}  // namespace shardtrain::obs
