// Every Boost.Program_options description lives here, so --help never drifts from parsing.
// Options come from the command line first, then from --config FILE (key = value lines).
#pragma once
#include <map>
#include <string>
#include <vector>

#include "shardtrain/ckpt/manager.h"
#include "shardtrain/data/prepare.h"
#include "shardtrain/fsdp/sharding.h"
#include "shardtrain/model/config.h"
#include "shardtrain/model/preference_loss.h"
#include "shardtrain/model/run_plan.h"
#include "shardtrain/obs/config.h"
#include "shardtrain/optim/optimizer.h"
#include "shardtrain/plan/planner.h"
#include "shardtrain/train/config.h"
#include "shardtrain/train/faults.h"
#include "shardtrain/train/validator.h"

namespace shardtrain::cli {

struct CommonOptions {
  int threads = 0;  // LibTorch intra-op threads; 0: all cores of this rank's share
  bool help = false;
  bool help_all = false;       // --help-all: also the hidden groups (fault injection)
  bool help_defaults = false;  // --help-defaults: the options' defaults as a markdown table
  bool wants_help() const { return help || help_all || help_defaults; }
};

// --model, --weights and the model overrides, as typed (0: not overridden).
struct ModelArgs {
  std::string spec, weights;  // spec empty: the config.json beside the weights, else tiny
  int64_t n_layers = 0, hidden = 0, inter = 0, heads = 0, kv_heads = 0, vocab = 0, max_pos = 0;
};

// Each concern's struct comes from its own module and is filled by the parser directly: what
// the user typed reaches the component without being copied by hand.
// --objective dpo and its settings (docs/dpo.md).
struct PreferenceOptions {
  bool enabled = false;  // --objective dpo (else sft)
  model::PreferenceConfig cfg;
  // eval --save-logps files of --data and --val-data; empty: the reference model runs each step
  std::string reference_logps, val_reference_logps;
};

struct TrainOptions {
  CommonOptions common;
  ModelArgs model_args;  // as typed: resolve_checkpoint_model's overrides of a checkpoint's model
  model::ModelConfig model;
  std::string weights;     // safetensors file, directory or index (optional)
  std::string model_from;  // where the model configuration came from, for the log
  bool resumes = false;    // --resume finds a checkpoint to continue from
  std::string
      resume_checkpoint;   // without --model and --weights: the checkpoint the model comes from
  std::string data;        // token file from 'shardtrain prepare'
  std::string val_data;    // optional validation token file
  std::string save_model;  // directory for model.safetensors + config.json (adapters: PEFT's)
  bool merge_adapters = false;    // --save-model writes merged full weights instead of the adapter
  std::string adapter_init;       // a PEFT adapter to start from (its settings are run.adapters)
  std::vector<std::string> args;  // as given, stored in checkpoints
  std::vector<std::pair<std::string, std::string>>
      option_values;  // every option's value, typed or default (MLflow's params)
  std::map<std::string, std::string>
      resume_said;  // the optimizer's, schedule's and DPO's settings: a resume says which changed
  train::TrainConfig train;
  fsdp::ShardingConfig fsdp;
  model::RunPlan run;        // what each unit computes: adapters, fp8, fused layers, loss chunks
  int context_parallel = 1;  // the mesh's context dimension (comm::with_context)
  optim::OptimizerConfig optim;
  ckpt::CheckpointConfig ckpt;
  train::AccuracyConfig accuracy;
  obs::ObsConfig obs;
  train::FaultConfig faults;
  PreferenceOptions preference;
};

// eval and generate run through the FSDP engine: any device, strategy and number of ranks.
struct EvalOptions {
  CommonOptions common;
  model::ModelConfig model;
  std::string weights;
  std::string adapter;      // a PEFT adapter directory to apply (run.adapters holds its settings)
  std::string data;         // token file: loss and perplexity
  std::string save_logits;  // HDF5: the first batch's tokens and fp32 logits, to compare with other
                            // implementations
  std::string save_logps;   // HDF5: each row's summed answer log-probability (DPO's reference)
  train::AccuracyConfig accuracy;
  fsdp::ShardingConfig fsdp;
  model::RunPlan run;  // run.adapters: the adapter's settings
  int context_parallel = 1;
  PreferenceOptions preference;  // --objective dpo: DPO's loss and metrics on --data's pairs
  int64_t batch_size = 8, max_batches = 0;
};

struct PrepareCliOptions {
  CommonOptions common;
  data::PrepareOptions prepare;
};

struct GenerateOptions {
  CommonOptions common;
  fsdp::ShardingConfig fsdp;
  model::RunPlan run;  // run.adapters: the adapter's settings
  int context_parallel = 1;
  model::ModelConfig model;
  std::string weights, tokenizer;
  std::string adapter;  // a PEFT adapter directory to apply (run.adapters holds its settings)
  std::vector<std::string> prompts;
  std::string template_name = "none", alpaca_input;  // alpaca: the prompt is the instruction
  std::string input, output;  // prompts.jsonl ("prompt" text or "messages"), completions.jsonl
  std::string chat_template = "auto";  // how --input's "messages" are rendered
  int64_t max_new_tokens = 64;
  double temperature = 0, top_p = 1.0;
  int64_t top_k = 0;
  int64_t num_samples = 1;         // completions per prompt
  int64_t generate_batch = 16;     // rows decoded at once on a rank
  std::vector<std::string> stops;  // --stop strings
  bool logprobs = false;           // the sampled tokens' log-probabilities in --output
  uint64_t seed = 0;
};

struct ConvertOptions {
  CommonOptions common;
  std::string input, output;  // a checkpoint .h5 <-> a Hugging Face model directory
  bool from_checkpoint =
      false;  // --input is a checkpoint (resolved to its file), not a model directory
  at::ScalarType dtype = at::kFloat;  // of the exported safetensors
  std::string weights;  // the base of a checkpoint with adapters; empty: the path it records
  bool merge_adapters = false;  // adapters: merged full weights instead of the PEFT adapter
  std::string
      tokenizer;  // the export's tokenizer when the checkpoint's --weights directory has none
};

// `shardtrain tokenize`: {"text": ...} JSONL to one JSON array of ids per line.
struct TokenizeOptions {
  CommonOptions common;
  std::string tokenizer;
  std::string input;  // empty: stdin
  bool add_special =
      false;  // the tokens the tokenizer adds itself (BOS for Llama-3), as add_special_tokens=True
};

struct InspectOptions {
  CommonOptions common;
  std::string checkpoint;
};

// Preflight: what each rank runs on, the network stack, and collective bandwidth sweeps.
struct PreflightOptions {
  CommonOptions common;
  std::string device = "auto";  // auto: cuda when a GPU is visible, else cpu (MPI)
  std::string json;             // --json FILE: the sweep as a fabric for `shardtrain plan --fabric`
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

// `shardtrain plan`: memory and step time across node counts and strategies (plan/planner.h).
struct PlanOptions {
  CommonOptions common;
  plan::PlanInput input;
  std::string csv, png, json_file;  // outputs beside the table; --json alone prints JSON to stdout
  bool json = false;
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
// Where the run is built, after parse_train: a resume without --model and --weights takes the
// model (and an adapter run's base weights) recorded in the checkpoint, which this reads; nothing
// to do otherwise. Throws UsageError as parse_train does.
void resolve_checkpoint_model(TrainOptions& o);
EvalOptions parse_eval(const std::vector<std::string>& args, std::string* help_text);
PrepareCliOptions parse_prepare(const std::vector<std::string>& args, std::string* help_text);
GenerateOptions parse_generate(const std::vector<std::string>& args, std::string* help_text);
ConvertOptions parse_convert(const std::vector<std::string>& args, std::string* help_text);
InspectOptions parse_inspect(const std::vector<std::string>& args, std::string* help_text);
TokenizeOptions parse_tokenize(const std::vector<std::string>& args, std::string* help_text);
PreflightOptions parse_preflight(const std::vector<std::string>& args, std::string* help_text);
ScalingOptions parse_scaling(const std::vector<std::string>& args, std::string* help_text);
PlanOptions parse_plan(const std::vector<std::string>& args, std::string* help_text);
ReportOptions parse_report(const std::vector<std::string>& args, std::string* help_text);
int64_t parse_bytes(const std::string& s, const char* opt);  // 4096, 64K, 1M, 2G (powers of 1024)

std::string top_level_help();

}  // namespace shardtrain::cli
