// `shardtrain train`: parse -> build the components -> fit -> export.
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <thread>

#include "option_parts.h"
#include "shardtrain/ckpt/dir_lock.h"
#include "shardtrain/cli/banner.h"
#include "shardtrain/cli/commands.h"
#include "shardtrain/cli/engine_setup.h"
#include "shardtrain/cli/run_checks.h"
#include "shardtrain/cli/run_params.h"
#include "shardtrain/data/data_identity.h"
#include "shardtrain/exports/hf_export.h"
#include "shardtrain/exports/peft_export.h"
#include "shardtrain/hw/accelerators.h"
#include "shardtrain/obs/rank_summary.h"
#include "shardtrain/runtime/counted.h"
#include "shardtrain/runtime/error.h"
#include "shardtrain/runtime/host_tensor_memory.h"
#include "shardtrain/runtime/logging.h"
#include "shardtrain/runtime/signals.h"
#include "shardtrain/train/dpo_reference.h"
#include "shardtrain/train/fit.h"
#include "shardtrain/train/sft_objective.h"

namespace shardtrain::cli {

int print_help(const std::string& text, const runtime::MpiEnv& env) {
  if (env.rank() == 0) std::cout << text;
  return 0;
}

void setup_threads(int threads, const runtime::MpiEnv& env) {
  if (threads <=
      0) {  // the launchers' binding (launch/bind-rank.sh) sets OMP_NUM_THREADS to the rank's cores
    const char* omp = std::getenv("OMP_NUM_THREADS");
    threads = omp ? std::atoi(omp) : 0;
  }
  if (threads <= 0) {
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    threads = std::max(
        1,
        cores /
            std::max(
                1,
                env.machine().local_size));  // the real machine's ranks, not the simulated node's
  }
  at::set_num_threads(threads);
}

namespace {

train::ReferenceSources reference_sources(const TrainOptions& o) {
  return {o.weights, o.adapter_init, o.train.seed, o.preference.reference_logps,
          o.preference.val_reference_logps};
}

// The export tokenizer: --weights, --tokenizer and --data; resuming without --weights, what the
// checkpoint's run recorded.
exports::TokenizerSource train_tokenizer(const TrainOptions& o) {
  if (!o.weights.empty() || o.resume_checkpoint.empty())
    return {o.weights, o.accuracy.tokenizer, o.data};
  exports::TokenizerSource src = exports::checkpoint_tokenizer(
      o.resume_checkpoint, o.accuracy.tokenizer, "");  // the run it continues
  src.data = o.data;
  return src;
}

// The data-parallel position: a context group's ranks read the same rows.
data::LoaderConfig loader_config(const train::TrainConfig& t, const comm::ParallelDims& dims) {
  data::LoaderConfig lc;
  lc.micro_batch = t.batch_size;
  lc.grad_accum = t.grad_accum;
  lc.seed = t.seed;
  lc.rank = dims.data_rank();
  lc.world = dims.data_world();
  return lc;
}

BannerFacts banner_facts(const EngineSetup& s, const data::DataLoader& loader,
                         const data::TokenFile& train, const data::TokenFile* val) {
  BannerFacts f;
  f.num_params = s.engine->spec().model.num_params();
  f.global_batch = loader.global_batch();
  f.threads = at::get_num_threads();
  const auto mem = s.engine->memory().report();
  f.persistent_bytes = mem.persistent();
  f.unsharded_bytes = mem.unsharded_bytes;
  f.base_bytes = mem.base_bytes;
  f.adapter_bytes = mem.trainable_bytes() + mem.host_bytes;
  f.host_bytes = mem.host_bytes;
  for (const auto& s : s.engine->layout().trainable_specs()) f.adapter_params += s.numel();
  f.weights_bytes_read = s.weights ? static_cast<int64_t>(s.weights->bytes_read()) : 0;
  f.train_rows = train.rows();
  f.val_rows = val ? val->rows() : 0;
  f.seq_len = train.seq_len();
  f.packing = train.meta().packing;
  f.format = train.meta().format;
  return f;
}

// The one line a stopped run ends with, and its exit code (docs/reliability.md).
int stop_message(train::FitEnd end, const train::SignalVerdict& signal,
                 const train::NonfiniteGuard& nonfinite, const runtime::MpiEnv& env) {
  if (end == train::FitEnd::kStoppedNonFinite) {
    if (env.rank() == 0) runtime::log::error_line("shardtrain: error: " + nonfinite.last_message());
    return runtime::kExitNonFinite;
  }
  runtime::log::info("stopped by " + signal.reason +
                     (signal.save ? " after a checkpoint" : " without a checkpoint") +
                     "; exiting with code " + std::to_string(signal.exit_code) +
                     (signal.save ? "; resume with --resume auto" : ""));
  return signal.exit_code;
}

}  // namespace

int cmd_train(const std::vector<std::string>& args, runtime::MpiEnv& env) {
  std::string help;
  TrainOptions o = runtime::parse_on_every_rank([&] {
    TrainOptions parsed = parse_train(args, &help);
    if (!parsed.common.wants_help())
      resolve_checkpoint_model(parsed);  // reads --resume's checkpoint
    return parsed;
  });
  if (o.common.wants_help()) return print_help(help, env);
  // Build: data, engine, optimizer, and the loop's components.
  runtime::install_stop_signals(
      !o.ckpt.dir.empty());  // now: a signal during the setup counts at the first step boundary
  env.set_ranks_per_node(o.fsdp.ranks_per_node);
  setup_threads(o.common.threads, env);
  check_groups(o.fsdp, o.context_parallel, env);
  check_run(o, env);
  runtime::track_host_tensor_memory();  // the metrics' host_tensor_peak_bytes, before any tensor
                                        // exists
  check_writable_outputs(o, env);
  // The data and the prompts in the model's own ids, before a step is spent on others.
  exports::check_tokenizers(train_tokenizer(o), {o.data, o.val_data},
                            o.accuracy.file.empty() ? "" : o.accuracy.tokenizer, o.model, env);
  // One writer per checkpoint directory, held until the export is done (docs/reliability.md).
  const ckpt::DirLock dir_lock =
      o.ckpt.dir.empty() ? ckpt::DirLock() : ckpt::DirLock::acquire(MPI_COMM_WORLD, o.ckpt.dir);
  std::string checked_train, checked_val;
  auto train = data::open_token_file("--data", o.data, o.model, env, &checked_train);
  auto val = o.val_data.empty()
                 ? nullptr
                 : data::open_token_file("--val-data", o.val_data, o.model, env, &checked_val);
  train::check_objective_data(o.preference.enabled,
                              {{"--data", train.get()}, {"--val-data", val.get()}},
                              "train them with --objective dpo");
  runtime::log::info(start_line(
      o));  // the first line, once the inputs are known to be good: a bad one is a one-line error
  for (const auto& line : {checked_train, checked_val})
    if (!line.empty()) runtime::log::info(line);
  auto accuracy = train::load_accuracy_task(o.accuracy, o.model);
  EngineSetup setup(o.model, o.fsdp, o.run, o.context_parallel, env, o.weights, o.train.seed,
                    o.adapter_init);
  fsdp::FsdpEngine& engine = *setup.engine;
  o.fsdp =
      engine.spec().sharding;  // as resolved for the device (--param-dtype auto), for the banner
  o.train.peak_tflops = hw::resolve_peak_tflops(o.train.peak_tflops, setup.device.name);
  optim::Optimizer optimizer = fsdp::make_optimizer(engine, o.optim);
  data::DataLoader loader(*train, loader_config(o.train, setup.groups));
  const auto hosts = obs::all_hosts(env.host(), MPI_COMM_WORLD);
  runtime::log::info(start_banner(o, env.topology(), hosts, setup.groups, setup.device,
                                  banner_facts(setup, loader, *train, val.get())));
  const train::FaultInjector faults(o.faults, env.rank());
  faults.after_setup();
  // Absolute: a resume, convert or PEFT may read it from another directory.
  o.ckpt.base_weights =
      o.weights.empty() ? "" : std::filesystem::absolute(o.weights).lexically_normal().string();
  ckpt::TrainState initial;
  initial.global_batch = loader.global_batch();
  initial.schedule_batch = loader.global_batch();
  initial.data = data::data_identity(*train, o.train.seed);
  initial.allow_data_change = o.ckpt.allow_data_change;
  initial.run_config = nlohmann::json{{"args", o.args}, {"optimizer", o.resume_said}};
  if (o.preference.enabled)
    initial.run_config["reference"] = train::reference_identity(reference_sources(o));
  ckpt::Manager checkpoints(o.ckpt, engine, setup.groups, optimizer, initial);
  const auto resumed = checkpoints.resume();
  if (resumed) loader.restore(resumed->loader);
  const train::RunStart start{resumed ? resumed->step : 0,
                              resumed ? resumed->schedule_batch : loader.global_batch(),
                              resumed ? resumed->schedule_steps : 0};
  if (resumed && resumed->saved_global_batch > 0 &&
      resumed->saved_global_batch != loader.global_batch())
    runtime::log::info(
        "resuming at global batch " +
        runtime::counted(loader.global_batch(), train->preference() ? "pair" : "row") +
        " (the checkpoint's run: " + std::to_string(resumed->saved_global_batch) + "): epoch " +
        std::to_string(loader.state().epoch) + " from row " + std::to_string(loader.state().row));
  train::Validator validator(engine, setup.groups, val.get(), accuracy.get(), o.train.batch_size,
                             o.train.val_batches, o.train.val_every);
  train::Reference reference;  // DPO's: set before the first step, which may be a resumed one
  std::unique_ptr<fsdp::Objective> objective = std::make_unique<train::SftObjective>();
  if (o.preference.enabled) {
    reference = train::make_reference(reference_sources(o), *setup.engine, setup.groups,
                                      setup.weights.get(), setup.adapter.get(), *train, val.get());
    objective = std::make_unique<train::DpoObjective>(o.preference.cfg, reference.train,
                                                      *setup.groups.context);
    if (val)
      validator.set_dpo(std::make_unique<train::DpoObjective>(o.preference.cfg, reference.val,
                                                              *setup.groups.context));
    runtime::log::info(std::string("objective: DPO (") +
                       runtime::enum_name(model::kPreferenceLossNames, o.preference.cfg.loss) +
                       ", beta " + parts::round_trip(o.preference.cfg.beta) + ") against " +
                       reference.what + "; --batch-size counts pairs");
  }
  train::SignalHandler signals(*setup.groups.world, checkpoints.enabled(), o.train.on_signal);
  train::NonfiniteGuard nonfinite(o.train.nonfinite, o.data);
  const train::RunParams params =
      run_params(o, env.size(), loader.global_batch(), train->seq_len(),
                 engine.spec().model.num_params(), setup.device.cuda ? "cuda" : "cpu");
  train::MetricsPublisher metrics(o.train, o.obs, engine, setup.groups, env, hosts,
                                  train->seq_len(), start.step, params);
  auto watchdog =
      obs::start_watchdog(o.obs, setup.groups, hosts, env);  // after the groups: stops before them
  train::StepProfiler profiler(o.train.profile_step, o.train.profile_dir, env.rank(),
                               setup.device.cuda);
  train::TrainComponents components{engine,  setup.groups, *objective,  optimizer,
                                    loader,  validator,    checkpoints, signals,
                                    metrics, faults,       nonfinite,   profiler};
  // Fit.
  const train::FitEnd end = train::fit(o.train, o.optim, components, start);
  watchdog.reset();  // every rank reaches this point before any stops exchanging heartbeats
  if (end != train::FitEnd::kCompleted) {  // a signal's stop is KILLED in MLflow; a non-finite
                                           // stop, FAILED
    metrics.end_run(end == train::FitEnd::kStoppedBySignal ? obs::RunStatus::kKilled
                                                           : obs::RunStatus::kFailed);
    return stop_message(end, signals.last(), nonfinite, env);
  }
  // Export.
  if (!o.save_model.empty()) {
    if (engine.layout().base_frozen() && !o.merge_adapters) {
      exports::export_peft(o.save_model, engine, o.weights, env.rank(), train_tokenizer(o));
      runtime::log::info("saved the adapter (PEFT format) to " + o.save_model);
    } else {
      exports::export_hf(o.save_model, o.model, engine, at::kFloat, env.rank(), train_tokenizer(o));
      runtime::log::info("saved " +
                         std::string(engine.layout().base_frozen() ? "the merged model" : "model") +
                         " to " + o.save_model);
    }
  }
  metrics.end_run(obs::RunStatus::kFinished);  // after the export: a failed export is a FAILED run
  return 0;
}

}  // namespace shardtrain::cli
