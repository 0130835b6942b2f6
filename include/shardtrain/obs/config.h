// Observability settings (train): the Prometheus endpoint and the collective watchdog.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "shardtrain/comm/process_groups.h"
#include "shardtrain/obs/collective_watchdog.h"
#include "shardtrain/runtime/mpi_env.h"

namespace shardtrain::obs {

struct ObsConfig {
  int metrics_port = 0;             // 0: off; node-local rank 0 serves /metrics
  std::string metrics_bind = "0.0.0.0";  // every interface: Prometheus scrapes from another host
  std::string metrics_job;          // the job label: --metrics-job, else $SLURM_JOB_ID, else "shardtrain"
  double collective_timeout = 600;  // seconds; 0: no watchdog
  int collective_dump = 8;          // collectives per group each rank prints on a timeout
  void validate();                  // throws UsageError naming the option; fills metrics_job's default
};

// The hang watchdog over every group, or null when --collective-timeout is 0 or this MPI lacks
// MPI_THREAD_MULTIPLE (rank 0 then says so). Collective over the world.
std::unique_ptr<CollectiveWatchdog> start_watchdog(const ObsConfig& cfg, const comm::ProcessGroups& groups,
                                                   const std::vector<std::string>& hosts, const runtime::MpiEnv& env);

}  // namespace shardtrain::obs
