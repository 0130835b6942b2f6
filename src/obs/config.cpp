#include "shardtrain/obs/config.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstdlib>
#include <ctime>
#include <filesystem>

#include "shardtrain/obs/mlflow_client.h"
#include "shardtrain/runtime/error.h"
#include "shardtrain/runtime/logging.h"

namespace shardtrain::obs {

void ObsConfig::validate() {
  if (metrics_port < 0 || metrics_port > 65535)
    throw runtime::UsageError("--metrics-port must be in 1..65535, or 0 for off");
  unsigned char addr[sizeof(in6_addr)];
  if (inet_pton(AF_INET, metrics_bind.c_str(), addr) != 1 &&
      inet_pton(AF_INET6, metrics_bind.c_str(), addr) != 1)
    throw runtime::UsageError("--metrics-bind '" + metrics_bind +
                              "' is not an IP address; give one of this host's, e.g. 127.0.0.1 "
                              "(this host only) or 0.0.0.0 (every interface)");
  if (collective_timeout < 0)
    throw runtime::UsageError("--collective-timeout must be >= 0 seconds (0: off)");
  if (collective_dump < 1 || collective_dump > 64)
    throw runtime::UsageError("--collective-dump must be in 1..64");
  check_mlflow_uri(mlflow_uri);
  if (!mlflow_uri.empty() && mlflow_experiment.empty())
    throw runtime::UsageError(
        "--mlflow-experiment must not be empty; give the experiment's name, e.g. shardtrain");
  if (metrics_job.empty()) {
    const char* id = std::getenv("SLURM_JOB_ID");
    metrics_job = id && *id ? id : "shardtrain";
  }
}

void ObsConfig::resolve_run_name(const std::string& checkpoint_dir) {
  if (run_name.empty() && !checkpoint_dir.empty()) {
    std::filesystem::path p = std::filesystem::absolute(checkpoint_dir).lexically_normal();
    if (p.filename().empty()) p = p.parent_path();  // runs/job1/ names job1, as runs/job1 does
    run_name = p.filename().string();
  }
  if (run_name.empty()) {
    char stamp[32];
    const std::time_t t = std::time(nullptr);
    std::tm utc{};
    gmtime_r(&t, &utc);
    std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &utc);
    run_name = stamp;
  }
  if (run_name.find('/') != std::string::npos || run_name == "." || run_name == "..")
    throw runtime::UsageError("--run-name '" + run_name +
                              "' must be one directory name, without '/' (e.g. llama7b-sft-r16)");
}

std::unique_ptr<CollectiveWatchdog> start_watchdog(const ObsConfig& cfg,
                                                   const comm::ParallelDims& groups,
                                                   const std::vector<std::string>& hosts,
                                                   const runtime::MpiEnv& env) {
  if (cfg.collective_timeout <= 0) return nullptr;
  if (env.thread_level() >= MPI_THREAD_MULTIPLE)
    return std::make_unique<CollectiveWatchdog>(groups, hosts, cfg.collective_timeout,
                                                cfg.collective_dump);
  if (env.rank() == 0)
    runtime::log::warn(
        "--collective-timeout needs MPI_THREAD_MULTIPLE, which this MPI does not provide; no hang "
        "watchdog");
  return nullptr;
}

}  // namespace shardtrain::obs
