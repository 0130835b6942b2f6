#include "shardtrain/train/fit.h"

#include <chrono>

#include "shardtrain/runtime/logging.h"
#include "shardtrain/train/flops.h"

namespace shardtrain {

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
  for (int64_t s = h.start_step; s < total; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    const StepData data = loader.next();
    StepMetrics m;
    m.step = s + 1;
    m.epoch = data.position.epoch;
    m.lr = sched.at(s, m.epoch);
    const StepResult r = h.step(data.micro, m.lr);
    m.step_time_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    m.loss = r.loss, m.grad_norm = r.grad_norm, m.tokens = r.tokens;
    const auto global_rows = static_cast<int64_t>(loader.global_rows(data.position).size());
    fill_throughput(m, global_rows * cfg.seq_len, fpt, cfg.peak_tflops, h.world_size);
    m.peak_mem_bytes = peak_host_memory_bytes();
    if (h.annotate) h.annotate(m);
    const bool last = s + 1 == total;
    if ((cfg.val_every > 0 && m.step % cfg.val_every == 0) || last) validate(m);
    metrics.write(m);
    if (m.step == 1 || last || m.step % cfg.log_every == 0 || m.val_loss >= 0 || m.val_accuracy >= 0)
      log::info(progress_line(m, total));
    if (h.after_step && !h.after_step(m.step, last)) return;
  }
}

}  // namespace shardtrain
