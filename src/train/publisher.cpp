#include "shardtrain/train/publisher.h"

#include <array>
#include <tuple>

#ifdef SHARDTRAIN_HAVE_CUDA
#include "shardtrain/cuda/device_memory.h"
#endif
#include "shardtrain/model/flops.h"
#include "shardtrain/obs/rank_summary.h"
#include "shardtrain/runtime/error.h"
#include "shardtrain/runtime/host_tensor_memory.h"
#include "shardtrain/runtime/logging.h"
#include "shardtrain/train/metric_scalars.h"
#include "shardtrain/train/mlflow_sink.h"
#include "shardtrain/train/tensorboard_sink.h"

namespace shardtrain::train {
namespace {

nlohmann::json comm_json(const comm::ParallelDims& g) {
  nlohmann::json j;
  for (const comm::Communicator* c : g.all())
    for (int k = 0; k < comm::kNumOps; ++k) {
      const auto& s = c->stats().ops[k];
      if (s.calls)
        j[c->name()][comm::op_name(static_cast<comm::Op>(k))] = {{"calls", s.calls},
                                                                 {"bytes", s.bytes}};
    }
  return j;
}

nlohmann::json memory_json(const fsdp::MemoryReport& m) {
  return {{"param_bytes", m.param_bytes},
          {"grad_bytes", m.grad_bytes},
          {"optimizer_bytes", m.optimizer_bytes},
          {"no_sync_bytes", m.no_sync_bytes},
          {"persistent_bytes", m.persistent()},
          {"unsharded_bytes", m.unsharded_bytes},
          // adapters: the frozen base and the adapters (master + AdamW) per rank; 0 and persistent
          // otherwise
          {"base_bytes", m.base_bytes},
          {"adapter_bytes", m.base_bytes > 0 ? m.trainable_bytes() : 0},
          // --cpu-offload: the trainable state in host memory (master, moments, gradient, mirror)
          {"host_bytes", m.host_bytes}};
}

}  // namespace

MetricsPublisher::MetricsPublisher(const TrainConfig& cfg, const obs::ObsConfig& obs,
                                   fsdp::FsdpEngine& engine, comm::ParallelDims& dims,
                                   const runtime::MpiEnv& env, std::vector<std::string> hosts,
                                   int64_t seq_len, int64_t start_step, const RunParams& run)
    : cfg_(cfg),
      engine_(engine),
      dims_(dims),
      env_(env),
      hosts_(std::move(hosts)),
      seq_len_(seq_len),
      flops_per_token_(model::flops_per_token(engine.spec().model, seq_len)),
      start_step_(start_step),
      writer_(env.rank() == 0 ? cfg.metrics_file : "", start_step) {
  if (obs.metrics_port > 0)
    exporter_ = std::make_unique<obs::NodeExporter>(obs.metrics_bind, obs.metrics_port,
                                                    obs.metrics_job, env.topology(), hosts_);
  if (env.rank() == 0 && !obs.tensorboard_dir.empty()) {
    auto tensorboard = std::make_unique<TensorBoardSink>(obs.tensorboard_dir, obs.run_name,
                                                         env.host(), start_step, run);
    runtime::log::info("TensorBoard: " + tensorboard->path());
    trackers_.push_back(std::move(tensorboard));
  }
  if (env.rank() == 0 && !obs.mlflow_uri.empty())
    trackers_.push_back(
        std::make_unique<MlflowSink>(obs, env.host(), env.rank(), env.size(),
                                     fsdp::sharding_name(engine.spec().sharding.sharding), run));
}

void MetricsPublisher::begin_step() {
  for (auto* c : dims_.all()) c->reset_stats();
  if (runtime::host_tensor_memory_tracked()) runtime::reset_host_tensor_peak();
}

void MetricsPublisher::timed(StepMetrics& m, double step_time_s) {
  m.step_time_s = step_time_s;
  fill_throughput(m, m.input_tokens, flops_per_token_, cfg_.peak_tflops, env_.size());
  interval_.add(m.input_tokens, step_time_s);
}

void MetricsPublisher::measure(StepMetrics& m, int64_t global_rows) {
  m.input_tokens = global_rows * seq_len_;
  m.peak_mem_bytes = peak_host_memory_bytes();
  // Before validation and the checkpoint: the step's own collectives only.
  m.extra = {{"comm", comm_json(dims_)}, {"memory", memory_json(engine_.memory().report())}};
  m.extra["memory"]["peak_gathered_units"] = engine_.schedule().peak_gathered_units();
  auto& by_phase = m.extra["memory"]["peak_bytes_by_phase"];
  for (runtime::Phase p :
       {runtime::Phase::kForward, runtime::Phase::kBackward, runtime::Phase::kOptimizer})
    by_phase[runtime::phase_name(p)] = m.peak_bytes[static_cast<int>(p)];
  m.extra["memory"]["peak_bytes_by_phase_counts"] =
      engine_.memory().counts_device() ? "cuda_allocator" : "engine_tensors";
  // Every CPU tensor, activations included: what the planner's memory model predicts on CPU.
  if (runtime::host_tensor_memory_tracked())
    m.extra["memory"]["host_tensor_peak_bytes"] = runtime::host_tensor_peak_bytes();
  const fsdp::MemoryPeaks step_peak =
      engine_.memory().end_step_peaks();  // every phase's, not only the last one's
#ifdef SHARDTRAIN_HAVE_CUDA
  if (engine_.spec().device.is_cuda()) {
    const fsdp::MemoryPeaks run_peak = engine_.memory().run_peaks();
    m.extra["memory"]["gpu_peak_allocated_bytes"] = step_peak.allocated;
    m.extra["memory"]["gpu_peak_reserved_bytes"] = step_peak.reserved;
    m.extra["memory"]["gpu_run_peak_allocated_bytes"] = run_peak.allocated;
    m.extra["memory"]["gpu_run_peak_reserved_bytes"] = run_peak.reserved;
    m.extra["memory"]["gpu_total_bytes"] = cuda::device_memory(engine_.spec().device.index()).total;
    gpu_peaks_ = {static_cast<double>(run_peak.allocated), static_cast<double>(run_peak.reserved)};
  }
#else
  (void)step_peak;
#endif
}

void MetricsPublisher::publish(StepMetrics& m, bool log_step, bool run_ends, int64_t total,
                               double checkpoint_s) {
  if (checkpoint_s > 0) last_checkpoint_s_ = checkpoint_s;
  timed_s_ += m.step_time_s + m.phases[runtime::Phase::kCheckpoint];
  m.eta_s =
      timed_s_ / static_cast<double>(m.step - start_step_) * static_cast<double>(total - m.step);
  // Every rank reaches the same log_step verdict, so the summary is a collective all join; the
  // metrics line gets it on every progress step, the log only at --breakdown-every.
  std::string breakdown;
  comm::Communicator& world = *dims_.world;
  if (log_step) {
    world.host_collective(comm::Op::kAllGather, 0, [&] {
      breakdown = obs::summarize_across_ranks(m.phases, m.extra, world.mpi(), hosts_);
    });
    ++log_steps_;
  }
  const nlohmann::json line = metrics_line(m);  // every sink logs what the JSONL line holds
  writer_.write(line);
  if (!trackers_.empty()) {
    const std::vector<MetricScalar> scalars = metric_scalars(line);
    for (auto& t : trackers_) {
      t->write(m.step, scalars);
      if (log_step || run_ends)
        t->flush();  // the progress line's cadence; a signal's stop is a run end
    }
  }
  if (log_step || m.val_loss >= 0 || m.val_accuracy >= 0) {
    StepMetrics line = m;  // the metrics file keeps the step's own figures
    interval_.take(line, flops_per_token_, cfg_.peak_tflops, env_.size());
    runtime::log::info(progress_line(line, total));
  }
  const bool breakdown_due =
      run_ends || (cfg_.breakdown_every > 0 && log_steps_ % cfg_.breakdown_every == 0);
  if (!breakdown.empty() && breakdown_due) runtime::log::info(breakdown);
  if (!exporter_) return;
  auto& r = series_;
  r.rank = env_.rank();
  r.host = env_.host();
  r.step = static_cast<double>(m.step);
  r.loss = m.loss;
  r.lr = m.lr;
  // The job's rates are rank 0's, the metrics file's: each rank times its own step, so each
  // would otherwise serve its own figure for the one job.
  std::array<double, 3> rates{m.tokens_per_s, m.tflops_per_device, m.mfu};
  world.host_collective(comm::Op::kBroadcast, sizeof rates, [&] {
    MPI_CHECK(MPI_Bcast(rates.data(), static_cast<int>(rates.size()), MPI_DOUBLE, 0, world.mpi()));
  });
  r.tokens_per_s = rates[0];
  r.tflops_per_device = rates[1];
  r.mfu = rates[2];
  r.step_seconds = m.step_time_s;
  r.phases = m.phases;
  r.host_peak_rss = static_cast<double>(m.peak_mem_bytes);
  std::tie(r.gpu_peak_allocated, r.gpu_peak_reserved) = gpu_peaks_;
  r.checkpoint_seconds = last_checkpoint_s_;
  r.skipped_steps = static_cast<double>(m.skipped_steps);
  r.pairs = static_cast<double>(m.preference.pairs);
  r.preference = m.preference.values;
  const auto groups = dims_.all();
  for (int k = 0; k < obs::RankSeries::kProcessGroups; ++k)
    for (int op = 0; op < comm::kNumOps; ++op) {
      r.calls[k][op] += static_cast<double>(groups[k]->stats().ops[op].calls);
      r.bytes[k][op] += static_cast<double>(groups[k]->stats().ops[op].bytes);
    }
  world.host_collective(comm::Op::kAllGather, 0, [&] { exporter_->publish(r); });
}

void MetricsPublisher::write_initial(const StepMetrics& m) {
  runtime::log::info("before training: val_loss " + std::to_string(m.val_loss) + " | exact_match " +
                     std::to_string(100.0 * m.val_accuracy) + "%");
  const nlohmann::json line = metrics_line(m);
  writer_.write(line);
  // The trackers get the validation figures alone: the line's training fields are 0 before step 1,
  // and a 0 loss at step 0 would start every curve at 0.
  nlohmann::json validation = {{"step", m.step}};
  for (const char* k : {"val_loss", "val_exact_match"})
    if (line.contains(k)) validation[k] = line[k];
  const std::vector<MetricScalar> scalars = metric_scalars(validation);
  for (auto& t : trackers_) {
    t->write(m.step, scalars);
    t->flush();
  }
}

void MetricsPublisher::end_run(obs::RunStatus status) {
  for (auto& t : trackers_) t->end(status);
}

}  // namespace shardtrain::train
