#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>
#include <tuple>
#include <utility>

#include "shardtrain/cli/banner.h"
#include "shardtrain/cli/commands.h"
#include "shardtrain/obs/collective_watchdog.h"
#include "shardtrain/obs/node_exporter.h"
#include "shardtrain/obs/rank_summary.h"
#ifdef SHARDTRAIN_HAVE_CUDA
#include "shardtrain/comm/nccl_communicator.h"
#include "shardtrain/cuda/device_memory.h"
#endif
#include "shardtrain/cli/options.h"
#include "shardtrain/runtime/error.h"
#include "shardtrain/runtime/logging.h"
#include "shardtrain/runtime/signals.h"
#include "shardtrain/ckpt/async_saver.h"
#include "shardtrain/ckpt/checkpoint.h"
#include "shardtrain/fsdp/engine.h"
#include "shardtrain/train/fit.h"
#include "shardtrain/train/flops.h"

namespace shardtrain::cli {

int print_help(const std::string& text, const MpiEnv& env) {
  if (env.rank() == 0) std::cout << text;
  return 0;
}

void setup_threads(int threads, const MpiEnv& env) {
  if (threads <= 0) {
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    threads = std::max(1, cores / std::max(1, env.topology().local_size));
  }
  at::set_num_threads(threads);
}

std::unique_ptr<TokenFile> open_token_file(const char* opt, const std::string& path, const ModelConfig& model) {
  auto f = std::make_unique<TokenFile>(path);
  if (f->meta().max_token_id >= model.vocab_size)
    throw UsageError(std::string(opt) + " " + path + " holds token id " + std::to_string(f->meta().max_token_id) +
                     " but the model's vocab_size is " + std::to_string(model.vocab_size) +
                     "; use a model whose vocabulary covers the tokenizer (--vocab-size)");
  if (f->seq_len() > model.max_position_embeddings)
    throw UsageError(std::string(opt) + " " + path + " has rows of " + std::to_string(f->seq_len()) +
                     " tokens, more than the model's max_position_embeddings " +
                     std::to_string(model.max_position_embeddings) + "; re-run prepare with a smaller --seq-len");
  return f;
}

std::unique_ptr<AccuracyTask> load_accuracy_task(const AccuracyOptions& o, const ModelConfig& model) {
  if (o.file.empty()) return nullptr;
  DataFormat fmt = o.format;
  auto task = std::make_unique<AccuracyTask>(AccuracyTask{Tokenizer(o.tokenizer), {}, o.max_new_tokens});
  if (task->tokenizer.vocab_size() > model.vocab_size)
    throw UsageError("--tokenizer has " + std::to_string(task->tokenizer.vocab_size()) + " pieces but the model's vocab_size is " +
                     std::to_string(model.vocab_size));
  task->records = read_records(o.file, fmt, o.samples);
  if (task->records.empty()) throw UsageError("--accuracy-file " + o.file + " has no usable records");
  for (const Record& r : task->records)  // checked here, before training, not at the first validation
    if (r.prompt.empty())
      throw UsageError("--accuracy-file " + o.file + ": exact-match accuracy needs prompt/answer records (alpaca or samsum), not plain text");
  return task;
}

ParamStore load_or_init(const ModelConfig& model, const std::string& weights, uint64_t seed) {
  if (weights.empty()) return ParamStore::initialize(model, seed);
  SafetensorsModel st(weights);
  auto p = ParamStore::load(model, st);
  log::info("loaded " + std::to_string(st.bytes_read()) + " bytes of weights from " + weights);
  return p;
}

namespace {

nlohmann::json comm_json(const comm::ProcessGroups& g) {
  nlohmann::json j;
  for (const comm::Communicator* c : g.all())
    for (int k = 0; k < comm::kNumOps; ++k) {
      const auto& s = c->stats().ops[k];
      if (s.calls) j[c->name()][comm::op_name(static_cast<comm::Op>(k))] = {{"calls", s.calls}, {"bytes", s.bytes}};
    }
  return j;
}

nlohmann::json memory_json(const fsdp::MemoryReport& m) {
  return {{"param_bytes", m.param_bytes}, {"grad_bytes", m.grad_bytes}, {"optimizer_bytes", m.optimizer_bytes},
          {"no_sync_bytes", m.no_sync_bytes}, {"persistent_bytes", m.persistent()}, {"unsharded_bytes", m.unsharded_bytes}};
}

// "1.23 s, 0.85 GB/s" for a file of the given path written or read in secs.
std::string seconds_and_rate(double secs, const std::string& path) {
  const double gb = static_cast<double>(std::filesystem::file_size(path)) / 1e9;
  char buf[96];
  std::snprintf(buf, sizeof buf, "%.3f s, %.3f GB, %.2f GB/s", secs, gb, gb / std::max(secs, 1e-9));
  return buf;
}

// MPI groups on CPU; on GPUs, NCCL communicators bootstrapped over the same MPI groups.
comm::ProcessGroups make_groups(const FsdpOptions& f, const MpiEnv& env, const DeviceChoice& device) {
#ifdef SHARDTRAIN_HAVE_CUDA
  if (device.cuda) return comm::make_nccl_groups(f.sharding, env.topology(), f.shard_group_size, env.host());
#endif
  (void)device;
  return comm::make_mpi_groups(f.sharding, env.topology(), f.shard_group_size);
}

// This rank's Prometheus series from a step's metrics; collective counters accumulate.
// gpu_peaks: {allocated, reserved} bytes, or {-1, -1} on a CPU rank.
void fill_series(obs::RankSeries& r, const StepMetrics& m, const comm::ProcessGroups& g, const MpiEnv& env,
                 double last_checkpoint_s, std::pair<double, double> gpu_peaks) {
  r.rank = env.rank(), r.host = env.host();
  r.step = static_cast<double>(m.step), r.loss = m.loss, r.lr = m.lr, r.tokens_per_s = m.tokens_per_s;
  r.tflops_per_device = m.tflops_per_device, r.mfu = m.mfu, r.step_seconds = m.step_time_s, r.phases = m.phases;
  r.host_peak_rss = static_cast<double>(m.peak_mem_bytes);
  std::tie(r.gpu_peak_allocated, r.gpu_peak_reserved) = gpu_peaks;
  r.checkpoint_seconds = last_checkpoint_s;
  const auto groups = g.all();
  for (int k = 0; k < obs::RankSeries::kGroups; ++k)
    for (int op = 0; op < comm::kNumOps; ++op) {
      r.calls[k][op] += static_cast<double>(groups[k]->stats().ops[op].calls);
      r.bytes[k][op] += static_cast<double>(groups[k]->stats().ops[op].bytes);
    }
}

fsdp::FsdpConfig engine_config(const TrainOptions& o) {
  fsdp::FsdpConfig f;
  f.sharding = o.fsdp.sharding, f.param_dtype = o.train.param_dtype, f.reduce_dtype = o.fsdp.reduce_dtype;
  f.activation_checkpointing = o.fsdp.activation_checkpointing, f.sync_each_microstep = !o.fsdp.no_sync_accumulation;
  f.grad_clip = o.train.grad_clip, f.adamw = o.train.adamw;
  f.max_inflight_gathers = o.fsdp.max_inflight_gathers;
  return f;
}

}  // namespace

int cmd_train(const std::vector<std::string>& args, MpiEnv& env) {
  std::string help;
  TrainOptions o = parse_train(args, &help);
  if (o.common.help) return print_help(help, env);
  env.set_ranks_per_node(o.fsdp.ranks_per_node);
  setup_threads(o.common.threads, env);
  const auto device = choose_device(o.fsdp.device, env);
  o.train.peak_tflops = resolve_peak_tflops(o.train.peak_tflops, device.name);
  auto train = open_token_file("--data", o.data, o.model);
  auto val = o.val_data.empty() ? nullptr : open_token_file("--val-data", o.val_data, o.model);
  auto accuracy = load_accuracy_task(o.accuracy, o.model);
  o.train.seq_len = train->seq_len();
  auto groups = make_groups(o.fsdp, env, device);
  std::unique_ptr<SafetensorsModel> weights = o.weights.empty() ? nullptr : std::make_unique<SafetensorsModel>(o.weights);
  auto cfg = engine_config(o);
  if (device.cuda) cfg.device = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(device.index));
  fsdp::FsdpEngine engine(o.model, cfg, groups, o.train.seed, weights.get());
  const auto mem = engine.memory();
  const auto& topo = env.topology();
  LoaderConfig lc;
  lc.micro_batch = o.train.batch_size, lc.grad_accum = o.train.grad_accum, lc.seed = o.train.seed;
  lc.rank = env.rank(), lc.world = env.size();
  DataLoader loader(*train, lc);
  FitHooks h;
  for (const auto& spec : llama_param_specs(o.model)) h.num_params += spec.numel();
  const auto hosts = obs::all_hosts(env.host(), MPI_COMM_WORLD);
  BannerFacts facts;
  facts.num_params = h.num_params, facts.global_batch = loader.global_batch(), facts.threads = at::get_num_threads();
  facts.persistent_bytes = mem.persistent(), facts.unsharded_bytes = mem.unsharded_bytes;
  facts.weights_bytes_read = weights ? static_cast<int64_t>(weights->bytes_read()) : 0;
  facts.train_rows = train->rows(), facts.val_rows = val ? val->rows() : 0;
  facts.packing = train->meta().packing, facts.format = train->meta().format;
  log::info(start_banner(o, topo, hosts, groups, device, facts));
  if (o.fsdp.fail_on_rank == env.rank())
    throw Error("fault injected by --fail-on-rank " + std::to_string(env.rank()));
  bool resumed = false;
  for (const auto& path : o.resume.empty() ? std::vector<std::string>{} : ckpt::resume_candidates(o.resume, o.checkpoint_dir)) {
    const auto t0 = std::chrono::steady_clock::now();
    try {
      const auto st = ckpt::load(path, engine);  // every rank reaches the same verdict
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      loader.restore(st.loader);
      h.start_step = st.step;
      log::info("resumed from " + path + " at step " + std::to_string(st.step) + " (" + seconds_and_rate(secs, path) + ")");
      resumed = true;
      break;
    } catch (const Error& e) {
      if (o.resume != "auto") throw;
      if (env.rank() == 0) log::warn("skipping checkpoint " + path + ": " + e.what());
    }
  }
  if (o.resume == "auto" && !resumed)
    log::info("no loadable checkpoint in " + o.checkpoint_dir + "; starting fresh from the seeded init");
  bool signalled_exit = false;
  double last_checkpoint_s = 0;  // the last save's duration (async: how long the loop was blocked)
  std::unique_ptr<ckpt::AsyncSaver> saver = o.async_save && !o.checkpoint_dir.empty() ? std::make_unique<ckpt::AsyncSaver>() : nullptr;
  if (!o.checkpoint_dir.empty()) {
    if (env.rank() == 0) std::filesystem::create_directories(o.checkpoint_dir);
    install_checkpoint_signal();
    h.after_step = [&](int64_t step, bool last) {
      int signal = checkpoint_requested() ? 1 : 0;  // any rank's SIGUSR1 counts for all
      groups.world->host_collective(comm::Op::kAllReduce, sizeof signal, [&] {
        MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &signal, 1, MPI_INT, MPI_MAX, groups.world->mpi()));
      });
      if (!signal && !last && (o.save_every <= 0 || step % o.save_every != 0)) return true;
      const std::string final_path = ckpt::step_path(o.checkpoint_dir, step);
      ckpt::TrainState st{step, loader.state(), nlohmann::json{{"args", o.args}}, model_to_hf_json(o.model)};
      signalled_exit = signal && o.exit_on_signal && !last;
      if (saver) {
        const double blocked = saver->start(final_path, engine, st, {o.ckpt_stripe_count, o.ckpt_stripe_size}, o.keep_checkpoints);
        last_checkpoint_s = blocked;
        log::info("checkpoint " + final_path + " started in the background; the loop was blocked " +
                  std::to_string(blocked) + " s" + (signal ? " (SIGUSR1)" : ""));
        if (last || signalled_exit) saver->wait();
      } else {
        const auto t0 = std::chrono::steady_clock::now();
        ckpt::save(final_path, engine, st, {o.ckpt_stripe_count, o.ckpt_stripe_size}, o.keep_checkpoints);
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        last_checkpoint_s = secs;
        log::info("checkpoint " + final_path + (signal ? " (SIGUSR1)" : "") + " (" + seconds_and_rate(secs, final_path) + ")");
      }
      clear_checkpoint_request();
      return !signalled_exit;
    };
  }
  h.before_step = [&](int64_t step) {  // inside the data_wait window: a slow input pipeline
    if (o.obs.sleep_rank == env.rank() && (o.obs.sleep_step == 0 || o.obs.sleep_step == step)) {
      if (o.obs.sleep_step != 0)
        log::warn("--debug-sleep: sleeping " + std::to_string(o.obs.sleep_seconds) + " s before step " + std::to_string(step));
      std::this_thread::sleep_for(std::chrono::duration<double>(o.obs.sleep_seconds));
    }
  };
  h.step = [&](const std::vector<Batch>& micro, double lr) {
    for (auto* c : groups.all()) c->reset_stats();
    return engine.step(micro, lr);
  };
  if (val) h.val_loss = [&] { return engine.evaluate(*val, o.train.batch_size, o.train.val_batches).loss; };
  if (accuracy) h.accuracy = [&] { return accuracy->run([&](const at::Tensor& t) { return engine.logits(t); }, o.model).exact_match; };
  std::pair<double, double> gpu_peaks{-1, -1};  // the last step's, for the Prometheus series
  h.annotate = [&](StepMetrics& m) {
    m.extra = {{"comm", comm_json(groups)}, {"memory", memory_json(mem)}};
    m.extra["memory"]["peak_gathered_units"] = engine.peak_gathered_units();
#ifdef SHARDTRAIN_HAVE_CUDA
    if (device.cuda) {
      const auto g = cuda::device_memory(device.index);
      m.extra["memory"]["gpu_peak_allocated_bytes"] = g.peak_allocated;
      m.extra["memory"]["gpu_peak_reserved_bytes"] = g.peak_reserved;
      m.extra["memory"]["gpu_total_bytes"] = g.total;
      gpu_peaks = {static_cast<double>(g.peak_allocated), static_cast<double>(g.peak_reserved)};
    }
#endif
  };
  h.world_size = env.size();
  h.writes_metrics = env.rank() == 0;
  h.across_ranks = [&](StepMetrics& m) {
    std::string line;
    groups.world->host_collective(comm::Op::kAllGather, 0, [&] { line = obs::summarize_across_ranks(m, groups.world->mpi(), hosts); });
    return line;
  };
  std::unique_ptr<obs::NodeExporter> exporter;
  if (o.obs.metrics_port > 0) {
    exporter = std::make_unique<obs::NodeExporter>(o.obs.metrics_port, o.obs.metrics_job, topo, hosts);
    h.publish = [&, series = obs::RankSeries{}](const StepMetrics& m) mutable {
      fill_series(series, m, groups, env, last_checkpoint_s, gpu_peaks);
      groups.world->host_collective(comm::Op::kAllGather, 0, [&] { exporter->publish(series); });
    };
  }
  std::unique_ptr<obs::CollectiveWatchdog> watchdog;  // declared after groups: stops before them
  if (o.obs.collective_timeout > 0) {
    if (env.thread_level() >= MPI_THREAD_MULTIPLE)
      watchdog = std::make_unique<obs::CollectiveWatchdog>(groups, hosts, o.obs.collective_timeout, o.obs.collective_dump);
    else if (env.rank() == 0)
      log::warn("--collective-timeout needs MPI_THREAD_MULTIPLE, which this MPI does not provide; no hang watchdog");
  }
  fit(o.train, o.model, loader, h);
  watchdog.reset();  // every rank reaches this point before any stops exchanging heartbeats
  if (signalled_exit) {
    log::info("exiting after the SIGUSR1 checkpoint with code " + std::to_string(kExitCheckpointed) + "; resume with --resume auto");
    return kExitCheckpointed;
  }
  if (!o.save_model.empty()) {
    export_hf(o.save_model, o.model, engine, at::kFloat, env.rank());
    log::info("saved model to " + o.save_model);
  }
  return 0;
}

}  // namespace shardtrain::cli
