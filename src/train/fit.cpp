#include "shardtrain/train/fit.h"

#include <ATen/record_function.h>

#include "shardtrain/fsdp/phase_clock.h"
#include "shardtrain/runtime/clock.h"
#include "shardtrain/runtime/logging.h"

namespace shardtrain::train {

FitEnd fit(const TrainConfig& cfg, const optim::OptimizerConfig& optim, TrainComponents& c, int64_t start) {
  const int64_t total = cfg.steps > 0 ? cfg.steps : cfg.epochs * c.loader.steps_per_epoch();
  optim::LrSchedule sched = optim.schedule;
  sched.total_steps = total;
  runtime::log::info("training " + c.engine.model().name + " (" + std::to_string(c.engine.model().num_params()) +
            " parameters) for " + std::to_string(total) + " steps, " + std::to_string(c.loader.steps_per_epoch()) +
            " steps/epoch");
  if (c.validator.has_accuracy() && start == 0) {  // the starting point, so the climb is visible
    StepMetrics m0;
    c.validator.run(m0);
    c.metrics.write_initial(m0);
  }
  for (int64_t s = start; s < total; ++s) {
    const runtime::Stopwatch step_clock;
    c.faults.before_step(s + 1);
    c.profiler.begin(s + 1);
    const data::StepData data = c.loader.next();
    const double data_wait = step_clock.seconds();
    StepMetrics m;
    m.step = s + 1;
    m.epoch = data.position.epoch;
    m.lr = sched.at(s, m.epoch);
    c.metrics.begin_step();
    const fsdp::GradResult g = c.engine.forward_backward(data.micro);
    std::vector<at::Tensor> grads = c.engine.grad_shards();
    c.faults.after_backward(m.step, grads);
    m.loss = g.loss;
    m.tokens = g.tokens;
    m.phases = g.phases;
    m.phases[runtime::Phase::kDataWait] = data_wait;
    m.peak_bytes = g.peak_bytes;
    fsdp::PhaseClock opt_clock(c.engine);
    NonfiniteVerdict finite;
    {
      RECORD_USER_SCOPE(kOptimizerRange);  // the profile's optimizer share
      m.grad_norm = c.optimizer.grad_norm(grads);  // the loss and the norm are reduced: every rank agrees
      finite = c.nonfinite.check(m.step, m.loss, m.grad_norm, data.batch_rows);
      if (finite.finite) c.optimizer.apply(m.lr, grads, m.grad_norm);
    }
    opt_clock.close(runtime::Phase::kOptimizer);
    m.peak_bytes[static_cast<int>(runtime::Phase::kOptimizer)] = c.engine.take_phase_peak();
    grads.clear();  // the shards live from backward to here only
    c.engine.release_grads();
    const runtime::PhaseTimes opt = opt_clock.finish();
    m.phases[runtime::Phase::kOptimizer] += opt[runtime::Phase::kOptimizer];
    m.phases[runtime::Phase::kExposedComm] += opt[runtime::Phase::kExposedComm];
    m.step_time_s = step_clock.seconds();
    c.profiler.end(m.step);
    m.skipped = !finite.finite;
    m.skipped_steps = c.nonfinite.skipped();
    c.metrics.measure(m, data.global_rows);
    if (finite.stop) {  // no validation, no checkpoint: the last saved one stands
      c.metrics.publish(m, true, true, total, 0);
      c.checkpoints.finish();
      return FitEnd::kStoppedNonFinite;
    }
    if (!finite.finite) runtime::log::info(finite.message);
    const bool last = m.step == total;
    if (c.validator.due(m.step, last)) c.validator.run(m);
    const runtime::Stopwatch ckpt_clock;  // the signal vote and the save: the checkpoint phase
    const SignalVerdict signal = c.signals.poll();
    const bool stop = signal.stop && !last;
    const bool unsaved_stop = stop && !signal.save;  // --on-signal exit-nosave, or no --checkpoint-dir
    const double saved_s =
        unsaved_stop ? 0 : c.checkpoints.after_step(m.step, signal.save ? signal.reason : "", last || stop, c.loader.state());
    m.phases[runtime::Phase::kCheckpoint] = ckpt_clock.seconds();
    const bool log_step = m.step == 1 || last || m.step % cfg.log_every == 0 || stop;
    c.metrics.publish(m, log_step, last || stop, total, saved_s);
    if (stop) {
      c.checkpoints.finish();  // a background save still in flight
      return FitEnd::kStoppedBySignal;
    }
  }
  c.checkpoints.finish();
  return FitEnd::kCompleted;
}

}  // namespace shardtrain::train
