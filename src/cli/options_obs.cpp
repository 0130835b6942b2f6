// train's observability options (the Prometheus endpoint, the collective watchdog, the experiment
// trackers), and the --debug-sleep fault-injection spec.
#include <cstdio>

#include "option_parts.h"
#include "shardtrain/runtime/error.h"

namespace shardtrain::cli::parts {

po::options_description observability_desc(obs::ObsConfig& o) {
  po::options_description d("Observability");
  d.add_options()("metrics-port", po::value(&o.metrics_port)->default_value(o.metrics_port),
                  "serve Prometheus /metrics from node-local rank 0 on this port (0: off)")(
      "metrics-bind", po::value(&o.metrics_bind)->default_value(o.metrics_bind),
      "the IP address the endpoint listens on: 0.0.0.0 (every interface, so that Prometheus on "
      "another host can "
      "scrape), 127.0.0.1 (this host only), or one interface's address")(
      "metrics-job", po::value(&o.metrics_job),
      "the job label of the metrics (default: $SLURM_JOB_ID, else shardtrain)")(
      "collective-timeout", real(&o.collective_timeout, o.collective_timeout),
      "seconds a collective may wait before the job names the ranks that have not reached it and "
      "exits 76 (0: off)")("collective-dump",
                           po::value(&o.collective_dump)->default_value(o.collective_dump),
                           "collectives per group each rank prints on a timeout")(
      "tensorboard", po::value(&o.tensorboard_dir),
      "write TensorBoard event files (every metrics-line figure, the configuration, the "
      "hyper-parameters) under "
      "DIR/<run name>/ from rank 0; view with tensorboard --logdir DIR")(
      "run-name", po::value(&o.run_name),
      "the experiment trackers' run, which a resumed run continues (default: --checkpoint-dir's "
      "directory name, else the UTC start time)")(
      "mlflow-uri", po::value(&o.mlflow_uri),
      "log the run to this MLflow tracking server (http:// or https://, e.g. http://127.0.0.1:5000 "
      "from `mlflow server`): "
      "the options as params, the metrics lines' figures, host, world size, strategy and commit as "
      "tags, the final status")("mlflow-experiment",
                                po::value(&o.mlflow_experiment)->default_value(o.mlflow_experiment),
                                "the MLflow experiment of the run, created when absent");
  return d;
}

void check_debug_sleep(train::FaultConfig& f, const std::string& debug_sleep) {
  if (debug_sleep.empty()) return;
  char extra = 0;
  if (std::sscanf(debug_sleep.c_str(), "%d:%d:%lf%c", &f.sleep_rank, &f.sleep_step,
                  &f.sleep_seconds, &extra) != 3 ||
      f.sleep_rank < 0 || f.sleep_step < 0 || f.sleep_seconds <= 0)
    throw runtime::UsageError("--debug-sleep '" + debug_sleep +
                              "' must be RANK:STEP:SECONDS, e.g. 1:3:30 (STEP 0: every step)");
}

}  // namespace shardtrain::cli::parts
