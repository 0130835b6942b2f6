// train's run-control options: what signals and non-finite losses do (docs/reliability.md),
// and the --debug-nan fault-injection spec.
#include <cstdio>
#include <cstring>

#include "option_parts.h"
#include "shardtrain/runtime/error.h"

namespace shardtrain::cli::parts {

po::options_description run_control_desc(train::TrainConfig& t, RunControlArgs& raw) {
  po::options_description d("Signals and non-finite losses (exit codes: docs/reliability.md)");
  d.add_options()(
      "on-signal", po::value(&raw.on_signal)->default_value(raw.on_signal),
      "continue: SIGUSR1 checkpoints and training goes on; exit: SIGUSR1 checkpoints and exits 75; "
      "exit-nosave: as exit, and SIGTERM/SIGINT stop without a checkpoint. With continue and exit, "
      "SIGTERM/SIGINT (scancel, a time limit) checkpoint when --checkpoint-dir is set and exit 75 "
      "(without a checkpoint: 143/130). Every rank stops at the same step boundary")(
      "on-nonfinite", po::value(&raw.on_nonfinite)->default_value(raw.on_nonfinite),
      "a NaN/Inf loss or gradient norm, found before the optimizer step: stop (exit 65, naming the "
      "step and the "
      "batch's rows) or skip (no optimizer step; counted as skipped_steps in the metrics)")(
      "max-nonfinite-steps",
      po::value(&t.nonfinite.max_in_a_row)->default_value(t.nonfinite.max_in_a_row),
      "with --on-nonfinite skip: stop (exit 65) after this many non-finite steps in a row");
  return d;
}

void check_run_control(train::TrainConfig& t, const RunControlArgs& raw) {
  t.on_signal = train::parse_on_signal(raw.on_signal);
  if (raw.on_nonfinite != "stop" && raw.on_nonfinite != "skip")
    throw runtime::UsageError("--on-nonfinite must be stop or skip, got '" + raw.on_nonfinite +
                              "'");
  t.nonfinite.skip = raw.on_nonfinite == "skip";
}

void check_debug_nan(train::FaultConfig& f, const std::string& spec) {
  if (spec.empty()) return;
  char kind[8] = {0};
  const int n = std::sscanf(spec.c_str(), "%d:%d:%7s", &f.nan_rank, &f.nan_step, kind);
  if (n < 2 || f.nan_rank < 0 || f.nan_step < 0 ||
      (n == 3 && std::strcmp(kind, "inf") != 0 && std::strcmp(kind, "nan") != 0))
    throw runtime::UsageError("--debug-nan '" + spec +
                              "' must be RANK:STEP[:nan|inf], e.g. 1:3 (STEP 0: every step)");
  f.nan_is_inf = n == 3 && std::strcmp(kind, "inf") == 0;
}

}  // namespace shardtrain::cli::parts
