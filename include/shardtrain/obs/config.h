// Observability settings (train): the Prometheus endpoint, the collective watchdog and the
// experiment trackers' run name, TensorBoard directory and MLflow server.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "shardtrain/comm/parallel_dims.h"
#include "shardtrain/obs/collective_watchdog.h"
#include "shardtrain/runtime/mpi_env.h"

namespace shardtrain::obs {

struct ObsConfig {
  int metrics_port = 0;                  // 0: off; node-local rank 0 serves /metrics
  std::string metrics_bind = "0.0.0.0";  // every interface: Prometheus scrapes from another host
  std::string metrics_job;  // the job label: --metrics-job, else $SLURM_JOB_ID, else "shardtrain"
  double collective_timeout = 600;  // seconds; 0: no watchdog
  int collective_dump = 8;          // collectives per group each rank prints on a timeout
  std::string
      tensorboard_dir;   // --tensorboard: event files under <dir>/<run_name>/ (rank 0); empty: off
  std::string run_name;  // the trackers' run: --run-name, else resolve_run_name()'s default
  std::string mlflow_uri;  // --mlflow-uri: an http(s):// MLflow tracking server (rank 0 logs the
                           // run); empty: off
  std::string mlflow_experiment = "shardtrain";  // created on the server when absent
  void validate();  // throws UsageError naming the option; fills metrics_job's default
  // The run name a resumed run shares with its first: --run-name, else the checkpoint directory's
  // name, else the UTC start time (20260127-142300). Throws UsageError naming --run-name.
  void resolve_run_name(const std::string& checkpoint_dir);
};

// The hang watchdog over every group, or null when --collective-timeout is 0 or this MPI lacks
// MPI_THREAD_MULTIPLE (rank 0 then says so). Collective over the world.
std::unique_ptr<CollectiveWatchdog> start_watchdog(const ObsConfig& cfg,
                                                   const comm::ParallelDims& groups,
                                                   const std::vector<std::string>& hosts,
                                                   const runtime::MpiEnv& env);

}  // namespace shardtrain::obs
