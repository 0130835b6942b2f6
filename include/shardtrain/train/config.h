// The training loop's own settings (parsed once, validated once). Sharding, optimization,
// checkpoints and observability each have their own struct in their own module.
#pragma once
#include <cstdint>
#include <string>

namespace shardtrain::train {

// --on-signal: what SIGUSR1 and SIGTERM/SIGINT do at the next step boundary (docs/reliability.md).
enum class OnSignal {
  kContinue,    // USR1: checkpoint, train on.  TERM/INT: checkpoint (with --checkpoint-dir), stop
  kExit,        // USR1: checkpoint, stop.      TERM/INT: as kContinue
  kExitNoSave,  // USR1: checkpoint, stop.      TERM/INT: stop without a checkpoint
};
OnSignal parse_on_signal(const std::string& value);  // throws UsageError naming --on-signal

// --on-nonfinite: a NaN/Inf loss or gradient norm stops the run, or skips the step.
struct NonfiniteConfig {
  bool skip = false;          // skip: no optimizer step, counted in the metrics
  int64_t max_in_a_row = 10;  // skip: stop after this many skipped steps in a row
};

struct TrainConfig {
  int64_t steps = 0;  // optimizer steps; 0: derive from epochs
  int64_t epochs = 1;
  int64_t batch_size = 8;   // micro-batch per rank
  int64_t grad_accum = 1;   // micro-batches per optimizer step
  uint64_t seed = 1234;     // init and data order
  int64_t val_every = 0;    // 0: validate only at the end
  int64_t val_batches = 8;  // <= 0: the whole validation file
  int64_t log_every = 10;
  int64_t breakdown_every =
      10;  // progress lines between step-time breakdowns (and at the end); 0: at the end only
  std::string metrics_file;
  std::string sample_ids_file;  // --log-sample-ids: each step's global batch, for checking a resume
  double peak_tflops = 0;       // per device, for MFU; 0: from the device name
  OnSignal on_signal = OnSignal::kContinue;
  NonfiniteConfig nonfinite;
  int64_t profile_step = 0;             // --profile-step: profile this optimizer step (0: none)
  std::string profile_dir = "profile";  // its Chrome traces and summaries, one per rank
  void validate() const;                // throws UsageError naming the option
};

}  // namespace shardtrain::train
