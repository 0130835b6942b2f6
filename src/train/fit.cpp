#include "shardtrain/train/fit.h"

#include <chrono>

#include "shardtrain/runtime/logging.h"
#include "shardtrain/train/flops.h"

namespace shardtrain {
namespace {
double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}
}  // namespace

void fit(const TrainConfig& cfg, const ModelConfig& model, DataLoader& loader, const FitHooks& h) {
  const int64_t per_epoch = loader.steps_per_epoch();
  const int64_t total = cfg.steps > 0 ? cfg.steps : cfg.epochs * per_epoch;
  LrSchedule sched = cfg.schedule;
  sched.total_steps = total;
  MetricsWriter metrics(h.writes_metrics ? cfg.metrics_file : "", h.start_step);
  const double fpt = flops_per_token(model, cfg.seq_len);
  log::info("training " + model.name + " (" + std::to_string(h.num_params) + " parameters) for " +
            std::to_string(total) + " steps, " + std::to_string(per_epoch) + " steps/epoch");
  auto validate = [&](StepMetrics& m) {
    if (h.val_loss) m.val_loss = h.val_loss();
    if (h.accuracy) m.val_accuracy = h.accuracy();
  };
  if (h.accuracy && h.start_step == 0) {  // the starting point, so the climb is visible
    StepMetrics m0;
    validate(m0);
    log::info("before training: val_loss " + std::to_string(m0.val_loss) + " | exact_match " +
              std::to_string(100.0 * m0.val_accuracy) + "%");
    metrics.write(m0);
  }
  double timed_s = 0;  // this run's step + checkpoint time, for the ETA
  for (int64_t s = h.start_step; s < total; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    if (h.before_step) h.before_step(s + 1);
    const StepData data = loader.next();
    const double data_wait = seconds_since(t0);
    StepMetrics m;
    m.step = s + 1;
    m.epoch = data.position.epoch;
    m.lr = sched.at(s, m.epoch);
    const StepResult r = h.step(data.micro, m.lr);
    m.step_time_s = seconds_since(t0);
    m.loss = r.loss, m.grad_norm = r.grad_norm, m.tokens = r.tokens;
    m.phases = r.phases;
    m.phases[Phase::kDataWait] = data_wait;
    fill_throughput(m, data.global_rows * cfg.seq_len, fpt, cfg.peak_tflops, h.world_size);
    m.peak_mem_bytes = peak_host_memory_bytes();
    if (h.annotate) h.annotate(m);  // before the checkpoint: the step's own collectives only
    const bool last = s + 1 == total;
    if ((cfg.val_every > 0 && m.step % cfg.val_every == 0) || last) validate(m);
    bool go_on = true;
    if (h.after_step) {  // checkpoints: timed as their own phase
      const auto tc = std::chrono::steady_clock::now();
      go_on = h.after_step(m.step, last);
      m.phases[Phase::kCheckpoint] = seconds_since(tc);
    }
    timed_s += m.step_time_s + m.phases[Phase::kCheckpoint];
    m.eta_s = timed_s / static_cast<double>(m.step - h.start_step) * static_cast<double>(total - m.step);
    // Every rank reaches the same verdict (go_on comes from an all-reduce), so the
    // cross-rank summary below is a collective all of them join.
    const bool log_step = m.step == 1 || last || m.step % cfg.log_every == 0 || !go_on;
    const std::string breakdown = log_step && h.across_ranks ? h.across_ranks(m) : "";
    metrics.write(m);
    if (log_step || m.val_loss >= 0 || m.val_accuracy >= 0) log::info(progress_line(m, total));
    if (!breakdown.empty()) log::info(breakdown);
    if (h.publish) h.publish(m);
    if (!go_on) return;
  }
}

}  // namespace shardtrain
