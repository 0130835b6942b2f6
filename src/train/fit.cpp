#include "shardtrain/train/fit.h"

#include <ATen/record_function.h>

#include "shardtrain/fsdp/phase_clock.h"
#include "shardtrain/runtime/clock.h"
#include "shardtrain/runtime/logging.h"
#include "shardtrain/train/sample_log.h"
#include "shardtrain/train/step_readback.h"

namespace shardtrain::train {

FitEnd fit(const TrainConfig& cfg, const optim::OptimizerConfig& optim, TrainComponents& c,
           const RunStart& from) {
  const int64_t ref =
      from.schedule_batch;  // progress and the schedule count steps of this many rows
  optim::LrSchedule sched = optim.schedule;
  sched.total_steps =
      cfg.steps > 0 ? cfg.steps : cfg.epochs * (c.loader.epoch_progress_rows(ref) / ref);
  const int64_t start = from.step;
  const int64_t total = start + c.loader.steps_until(sched.total_steps * ref, ref);
  c.checkpoints.set_schedule(ref, sched.total_steps);
  if (from.schedule_steps > 0 && from.schedule_steps != sched.total_steps)
    runtime::log::warn_once(
        "the schedule's total changes from " + std::to_string(from.schedule_steps) + " to " +
        std::to_string(sched.total_steps) + " steps of global batch " + std::to_string(ref) +
        " (--steps or --epochs differ from the checkpoint's run)");
  runtime::log::info("training " + c.engine.spec().model.name + " (" +
                     std::to_string(c.engine.spec().model.num_params()) + " parameters) for " +
                     std::to_string(total) + " steps, " +
                     std::to_string(c.loader.steps_per_epoch()) + " steps/epoch" +
                     (ref == c.loader.global_batch()
                          ? std::string()
                          : "; the schedule counts " + std::to_string(sched.total_steps) +
                                " steps of the first run's global batch " + std::to_string(ref)));
  SampleLog samples(cfg.sample_ids_file, c.dims.world->rank());
  if (c.validator.has_accuracy() && start == 0) {  // the starting point, so the climb is visible
    StepMetrics m0;
    c.validator.run(m0);
    c.metrics.write_initial(m0);
  }
  StepReadback readback;  // steps whose loss and norm are still on the device
  // The steps' time: from one host read to the next, when the device has finished them (the host
  // alone runs ahead of a GPU), without the validation and checkpoints in between.
  runtime::Stopwatch since_read;
  for (int64_t s = start; s < total; ++s) {
    const runtime::Stopwatch step_clock;
    c.faults.before_step(s + 1);
    c.profiler.begin(s + 1);
    const double progress =
        static_cast<double>(c.loader.progress_rows(ref)) / static_cast<double>(ref);
    const data::StepData data = c.loader.next();
    PendingStep p;
    StepMetrics& m = p.m;
    m.phases[runtime::Phase::kDataWait] = step_clock.seconds();
    m.step = s + 1;
    m.epoch = data.position.epoch;
    m.lr = sched.at(progress, m.epoch);
    samples.write(m.step, m.epoch, data.batch_rows);
    c.metrics.begin_step();
    // --cpu-offload without clipping: each unit's AdamW runs on the host as soon as its gradient
    // is there, during the backward pass. Not where a step may be skipped: a stopped run's steps
    // are never saved, a skipped one must leave the weights alone.
    if (c.optimizer.can_arm() && !c.nonfinite.skips())
      c.optimizer.arm(m.lr, c.engine.grad_shards());
    const fsdp::GradResult g = c.engine.forward_backward(fsdp::context_split(data.micro, c.dims),
                                                         c.objective, /*read_loss=*/false);
    std::vector<at::Tensor> grads = c.engine.grad_shards();
    c.faults.after_backward(m.step, grads);
    m.tokens = g.tokens;
    m.peak_bytes = g.peak_bytes;
    p.optimizer = std::make_shared<fsdp::PhaseClock>(c.dims, c.engine.spec().device.is_cuda());
    {
      RECORD_USER_SCOPE(kOptimizerRange);  // the profile's optimizer share
      p.loss = g.loss_t;
      p.preference = g.stats;
      p.aux = g.aux_t;
      p.grad_norm =
          c.optimizer.grad_norm(grads);  // reduced, like the loss: every rank's guard agrees
      c.optimizer.apply(m.lr, grads, p.grad_norm, c.nonfinite.skip_on_device(p.loss, p.grad_norm));
    }
    p.optimizer->close(runtime::Phase::kOptimizer);
    m.peak_bytes[static_cast<int>(runtime::Phase::kOptimizer)] =
        c.engine.memory().take_phase_peak();
    grads.clear();  // the shards live from backward to here only
    c.engine.release_grads();
    c.profiler.end(m.step);
    c.metrics.measure(m, data.global_rows);
    p.forward_backward = g.clock;
    p.rows = data.batch_rows;
    const int64_t step = m.step;
    readback.add(std::move(p));
    const bool last = step == total;
    const SignalVerdict signal = c.signals.poll();
    const bool stop = signal.stop && !last;
    const bool log_step = step == 1 || last || step % cfg.log_every == 0 || stop;
    const bool read_now = log_step || c.metrics.wants_every_step() || c.validator.due(step, last) ||
                          c.checkpoints.due(step, signal.save, last || stop);
    if (!read_now) continue;
    std::vector<PendingStep> steps = readback.take();  // the one host read since the last
    const double step_s = since_read.seconds() / static_cast<double>(steps.size());
    for (PendingStep& done : steps) {
      c.metrics.timed(done.m, step_s);
      const NonfiniteVerdict finite =
          c.nonfinite.check(done.m.step, done.m.loss, done.m.grad_norm, done.rows);
      done.m.skipped = !finite.finite;
      done.m.skipped_steps = c.nonfinite.skipped();
      if (finite.stop) {  // the device skipped every step since: no validation, no checkpoint
        c.metrics.publish(done.m, true, true, total, 0);
        c.optimizer.settle();  // --cpu-offload: the host steps in flight
        c.checkpoints.finish();
        return FitEnd::kStoppedNonFinite;
      }
      if (!finite.finite) runtime::log::info(finite.message);
      if (&done != &steps.back()) c.metrics.publish(done.m, false, false, total, 0);
    }
    StepMetrics& now = steps.back().m;
    if (c.validator.due(now.step, last)) c.validator.run(now);
    const runtime::Stopwatch ckpt_clock;  // the save: the checkpoint phase
    const bool unsaved_stop =
        stop && !signal.save;  // --on-nonfinite exit-nosave, or no --checkpoint-dir
    const double saved_s =
        unsaved_stop ? 0
                     : c.checkpoints.after_step(now.step, signal.save ? signal.reason : "",
                                                last || stop, c.loader.state());
    now.phases[runtime::Phase::kCheckpoint] = ckpt_clock.seconds();
    c.metrics.publish(now, log_step, last || stop, total, saved_s);
    since_read.restart();  // the next steps' time starts here
    if (stop) {
      c.optimizer.settle();    // --cpu-offload: the host steps in flight
      c.checkpoints.finish();  // a background save still in flight
      return FitEnd::kStoppedBySignal;
    }
  }
  c.optimizer.settle();  // --cpu-offload: the host steps in flight
  c.checkpoints.finish();
  return FitEnd::kCompleted;
}

}  // namespace shardtrain::train
