// train's observability options: the Prometheus endpoint and the collective watchdog.
#include <cstdio>
#include <cstdlib>

#include "option_parts.h"
#include "shardtrain/runtime/error.h"

namespace shardtrain::cli::parts {

po::options_description observability_desc(ObsOptions& o, std::string& debug_sleep) {
  po::options_description d("Observability");
  d.add_options()("metrics-port", po::value(&o.metrics_port)->default_value(0),
                  "serve Prometheus /metrics from node-local rank 0 on this port (0: off)")(
      "metrics-job", po::value(&o.metrics_job), "the job label of the metrics (default: $SLURM_JOB_ID, else shardtrain)")(
      "collective-timeout", po::value(&o.collective_timeout)->default_value(600),
      "seconds a collective may wait before the job names the ranks that have not reached it and exits 76 (0: off)")(
      "collective-dump", po::value(&o.collective_dump)->default_value(8), "collectives per group each rank prints on a timeout")(
      "debug-sleep", po::value(&debug_sleep),
      "fault injection for tests: RANK:STEP:SECONDS sleeps that rank before that step (STEP 0: every step)");
  return d;
}

void check_observability(ObsOptions& o, const std::string& debug_sleep) {
  if (o.metrics_port < 0 || o.metrics_port > 65535) throw UsageError("--metrics-port must be in 1..65535, or 0 for off");
  if (o.collective_timeout < 0) throw UsageError("--collective-timeout must be >= 0 seconds (0: off)");
  if (o.collective_dump < 1 || o.collective_dump > 64) throw UsageError("--collective-dump must be in 1..64");
  if (o.metrics_job.empty()) {
    const char* id = std::getenv("SLURM_JOB_ID");
    o.metrics_job = id && *id ? id : "shardtrain";
  }
  if (!debug_sleep.empty()) {
    char extra = 0;
    if (std::sscanf(debug_sleep.c_str(), "%d:%d:%lf%c", &o.sleep_rank, &o.sleep_step, &o.sleep_seconds, &extra) != 3 ||
        o.sleep_rank < 0 || o.sleep_step < 0 || o.sleep_seconds <= 0)
      throw UsageError("--debug-sleep '" + debug_sleep + "' must be RANK:STEP:SECONDS, e.g. 1:3:30 (STEP 0: every step)");
  }
}

}  // namespace shardtrain::cli::parts
