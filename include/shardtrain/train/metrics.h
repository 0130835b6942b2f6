// Per-step metrics: one JSON object per line in --metrics-file, and rank-0 progress lines.
#pragma once
#include <array>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "shardtrain/model/preference_loss.h"
#include "shardtrain/runtime/phases.h"

namespace shardtrain::train {

struct StepMetrics {
  int64_t step = 0, epoch = 0, tokens = 0;  // tokens: loss tokens in the global batch
  int64_t input_tokens = 0;                 // every token of the global batch (B·T)
  double loss = 0, lr = 0, grad_norm = 0;
  double step_time_s = 0, tokens_per_s = 0, tflops_per_device = 0, mfu = 0;
  int64_t peak_mem_bytes = 0;
  runtime::PhaseTimes phases;  // this rank's step-time breakdown
  std::array<int64_t, runtime::kNumPhases>
      peak_bytes{};          // the most memory held in each phase (0: not measured)
  double eta_s = 0;          // remaining steps x this run's mean step (+ checkpoint) time
  double val_loss = -1;      // < 0: no validation this step
  double aux_loss = -1;      // output_router_logits: the load-balancing loss; < 0: none
  double val_accuracy = -1;  // exact match on the accuracy file; < 0: not measured this step
  bool skipped =
      false;  // a non-finite loss or gradient norm: no optimizer step (--on-nonfinite skip)
  int64_t skipped_steps = 0;  // steps skipped so far in this run
  nlohmann::json extra;       // engine figures (collectives, sharded memory), merged into the line
  model::PreferenceMetrics preference;      // DPO: the step's (pairs 0: not DPO)
  model::PreferenceMetrics val_preference;  // DPO: the held-out pairs' (pairs 0: not this step)
};

// Throughput figures from the step time. tokens_per_s counts every input token (B·T), as the
// FLOPs formula does; peak_tflops <= 0 leaves mfu at 0.
void fill_throughput(StepMetrics& m, int64_t input_tokens, double flops_per_token,
                     double peak_tflops, int world_size);

// Sums the steps since the last progress line, so that the line's throughput covers the whole
// interval rather than its last (possibly short) step.
class IntervalThroughput {
 public:
  void add(int64_t input_tokens, double step_time_s);
  // Sets m's tokens_per_s, tflops_per_device and mfu over the interval, and step_time_s to its
  // mean step; then starts a new interval. An empty interval leaves m as it is.
  void take(StepMetrics& m, double flops_per_token, double peak_tflops, int world_size);

 private:
  int64_t tokens_ = 0, steps_ = 0;
  double seconds_ = 0;
};

// Resident-set high-water mark of this process (CPU), in bytes.
int64_t peak_host_memory_bytes();

// The metrics line of one step: the JSONL file's object, which the trackers' sinks read too.
nlohmann::json metrics_line(const StepMetrics& m);

class MetricsWriter {
 public:
  // Empty path: write nothing. keep_through_step > 0 (a resumed run): keep the file's lines up to
  // that step and append, so a requeued job has one history without the lines it redoes.
  explicit MetricsWriter(const std::string& path, int64_t keep_through_step = 0);
  void write(const nlohmann::json& line);  // one metrics_line()

 private:
  std::ofstream out_;
};

std::string progress_line(const StepMetrics& m, int64_t total_steps);
std::string format_duration(double secs);  // 42s, 3m05s, 2h14m

}  // namespace shardtrain::train
