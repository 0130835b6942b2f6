// Every Boost.Program_options description lives here, so --help never drifts from parsing.
// Options come from the command line first, then from --config FILE (key = value lines).
#pragma once
#include <string>
#include <vector>

#include "shardtrain/comm/process_groups.h"
#include "shardtrain/data/prepare.h"
#include "shardtrain/model/config.h"
#include "shardtrain/train/trainer.h"

namespace shardtrain::cli {

struct CommonOptions {
  int threads = 0;  // LibTorch intra-op threads; 0: all cores of this rank's share
  bool help = false;
};

// Exact-match accuracy by generation on a JSONL file (train's validation and eval).
struct AccuracyOptions {
  std::string file, tokenizer;
  DataFormat format = DataFormat::kAuto;
  int64_t samples = 100, max_new_tokens = 32;
};

// How the model is sharded across ranks (PyTorch FSDP's options, plus the topology override).
struct FsdpOptions {
  comm::Sharding sharding = comm::Sharding::kFullShard;
  at::ScalarType reduce_dtype = at::kFloat;
  bool activation_checkpointing = false;
  bool no_sync_accumulation = false;  // keep unsharded grads across micro-steps, reduce once
  int shard_group_size = 0;           // hybrid: 0 = one node
  int ranks_per_node = 0;             // 0: ask MPI which ranks share memory
  int fail_on_rank = -1;              // fault injection for tests: this rank throws after setup
  int max_inflight_gathers = 2;       // PyTorch FSDP's limit_all_gathers: units gathered at once
  std::string device = "auto";        // auto: this node's GPU for the local rank, else cpu
};

// Observability and hang detection (train).
struct ObsOptions {
  int metrics_port = 0;            // 0: off; node-local rank 0 serves /metrics
  std::string metrics_job;         // the job label: --metrics-job, else $SLURM_JOB_ID, else "shardtrain"
  double collective_timeout = 600;  // seconds; 0: no watchdog
  int collective_dump = 8;         // collectives per group each rank prints on a timeout
  int sleep_rank = -1, sleep_step = 0;  // fault injection (--debug-sleep): rank, step (0: every step)
  double sleep_seconds = 0;
};

struct TrainOptions {
  CommonOptions common;
  FsdpOptions fsdp;
  ModelConfig model;
  std::string weights;     // safetensors file, directory or index (optional)
  std::string data;        // token file from 'shardtrain prepare'
  std::string val_data;    // optional validation token file
  AccuracyOptions accuracy;
  std::string save_model;  // directory for model.safetensors + config.json
  std::string checkpoint_dir, resume;  // resume: "", "auto" or a checkpoint path
  int64_t save_every = 0;
  int keep_checkpoints = 0;
  int ckpt_stripe_count = 0;
  int64_t ckpt_stripe_size = 0;
  bool exit_on_signal = false;  // --on-signal exit: checkpoint on SIGUSR1, then exit 75
  bool async_save = false;      // write checkpoints on a background thread
  std::vector<std::string> args;  // as given, stored in checkpoints
  TrainConfig train;
  ObsOptions obs;
};

struct EvalOptions {
  CommonOptions common;
  ModelConfig model;
  std::string weights;
  std::string data;  // token file: loss and perplexity
  AccuracyOptions accuracy;
  int64_t batch_size = 8, max_batches = 0;
  uint64_t seed = 1234;
};

struct PrepareCliOptions {
  CommonOptions common;
  PrepareOptions prepare;
};

struct GenerateOptions {
  CommonOptions common;
  ModelConfig model;
  std::string weights, tokenizer;
  std::vector<std::string> prompts;
  std::string template_name = "none", input;  // alpaca: the prompt is the instruction
  int64_t max_new_tokens = 64;
  double temperature = 0, top_p = 1.0;
  uint64_t seed = 0;
};

struct ConvertOptions {
  CommonOptions common;
  std::string input, output;  // a checkpoint .h5 <-> a Hugging Face model directory
  at::ScalarType dtype = at::kFloat;  // of the exported safetensors
};

struct InspectOptions {
  CommonOptions common;
  std::string checkpoint;
};

// Preflight: what each rank runs on, the network stack, and collective bandwidth sweeps.
struct PreflightOptions {
  CommonOptions common;
  std::string device = "auto";  // auto: cuda when a GPU is visible, else cpu (MPI)
  double min_busbw = 0;         // GB/s; 0 reports without a pass/fail threshold
  int64_t min_bytes = 1 << 20, max_bytes = int64_t{1} << 30;
  int step_factor = 2, iters = 5, warmup = 1;
  std::vector<std::string> ops{"all_gather", "reduce_scatter", "all_reduce"};
  bool intra = true, inter = true, sweep = true;
  int ranks_per_node = 0;
};

// `shardtrain scaling`: one metrics file per node count, reduced to a table and a chart.
struct ScalingRun {
  int nodes = 0;
  std::string metrics;  // JSONL written by train --metrics-file
};
struct ScalingOptions {
  CommonOptions common;
  std::vector<ScalingRun> runs;
  std::string out_dir, title;
  int skip_steps = 2;  // warmup steps left out of the medians
};

// `shardtrain report`: per-step metrics files reduced to loss, throughput and breakdown charts.
struct ReportOptions {
  CommonOptions common;
  std::vector<std::string> metrics;  // JSONL files written by train --metrics-file
  std::string out_dir, title;
  int smooth = 0;  // trailing mean of the loss over K steps; 0 or 1: none
};

// Both throw UsageError (main exits 2) with one line naming the option to change.
// A --help request sets common.help and leaves usage text in *help_text.
TrainOptions parse_train(const std::vector<std::string>& args, std::string* help_text);
EvalOptions parse_eval(const std::vector<std::string>& args, std::string* help_text);
PrepareCliOptions parse_prepare(const std::vector<std::string>& args, std::string* help_text);
GenerateOptions parse_generate(const std::vector<std::string>& args, std::string* help_text);
ConvertOptions parse_convert(const std::vector<std::string>& args, std::string* help_text);
InspectOptions parse_inspect(const std::vector<std::string>& args, std::string* help_text);
PreflightOptions parse_preflight(const std::vector<std::string>& args, std::string* help_text);
ScalingOptions parse_scaling(const std::vector<std::string>& args, std::string* help_text);
ReportOptions parse_report(const std::vector<std::string>& args, std::string* help_text);
int64_t parse_bytes(const std::string& s, const char* opt);  // 4096, 64K, 1M, 2G (powers of 1024)

std::string top_level_help();

}  // namespace shardtrain::cli
