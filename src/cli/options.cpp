#include "shardtrain/cli/options.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "option_parts.h"
#include "shardtrain/runtime/error.h"

namespace fs = std::filesystem;

namespace shardtrain::cli {
namespace parts {

po::options_description common_desc(CommonOptions& c) {
  po::options_description d("General");
  d.add_options()("help,h", po::bool_switch(&c.help), "show this help")(
      "config", po::value<std::string>(), "read more options from FILE (key = value per line)")(
      "threads", po::value(&c.threads)->default_value(0), "LibTorch CPU threads (0: all cores)");
  return d;
}

po::options_description model_desc(ModelArgs& m) {
  std::string presets;
  for (const auto& n : model_preset_names()) presets += (presets.empty() ? "" : ", ") + n;
  po::options_description d("Model");
  d.add_options()("model", po::value(&m.spec)->default_value("tiny"),
                  ("preset (" + presets + ") or a Hugging Face config.json / model directory").c_str())(
      "weights", po::value(&m.weights), "safetensors file, directory or model.safetensors.index.json")(
      "n-layers", po::value(&m.n_layers), "override num_hidden_layers")(
      "hidden-size", po::value(&m.hidden), "override hidden_size")(
      "intermediate-size", po::value(&m.inter), "override intermediate_size")(
      "n-heads", po::value(&m.heads), "override num_attention_heads")(
      "n-kv-heads", po::value(&m.kv_heads), "override num_key_value_heads (GQA when < n-heads)")(
      "vocab-size", po::value(&m.vocab), "override vocab_size")(
      "max-seq-len", po::value(&m.max_pos), "override max_position_embeddings");
  return d;
}

ModelConfig resolve(const ModelArgs& m) {
  ModelConfig c = resolve_model(m.spec);
  if (m.n_layers) c.num_layers = m.n_layers;
  if (m.hidden) c.hidden_size = m.hidden;
  if (m.inter) c.intermediate_size = m.inter;
  if (m.heads) c.num_heads = m.heads;
  if (m.kv_heads) c.num_kv_heads = m.kv_heads;
  if (m.vocab) c.vocab_size = m.vocab;
  if (m.max_pos) c.max_position_embeddings = m.max_pos;
  c.validate();
  return c;
}

void check_device(const std::string& device) {
  if (device != "auto" && device != "cpu" && device != "cuda") throw UsageError("--device must be auto, cpu or cuda");
}

void require_file(const std::string& opt, const std::string& path) {
  if (!path.empty() && !fs::exists(path)) throw UsageError(opt + ": " + path + " does not exist");
}

void parse_into(const std::vector<std::string>& args, const po::options_description& all,
                const po::positional_options_description* positional) {
  po::variables_map vm;
  try {
    po::command_line_parser parser(args);
    parser.options(all);
    if (positional) parser.positional(*positional);
    po::store(parser.run(), vm);
    if (vm.count("config")) {
      const auto path = vm["config"].as<std::string>();
      std::ifstream in(path);
      if (!in) throw UsageError("--config: cannot open " + path);
      po::store(po::parse_config_file(in, all), vm);
    }
    po::notify(vm);
  } catch (const po::error& e) {
    throw UsageError(e.what());
  }
}

std::string usage_text(const std::string& usage, const po::options_description& all) {
  std::ostringstream os;
  os << usage << "\n" << all;
  return os.str();
}

void positive(const char* opt, double v, const char* hint) {
  if (!(v > 0)) {
    std::ostringstream os;
    os << opt << " must be positive, got " << v << "; " << hint;
    throw UsageError(os.str());
  }
}

at::ScalarType parse_dtype(const std::string& s, const char* opt) {
  if (s == "fp32" || s == "float32") return at::kFloat;
  if (s == "bf16" || s == "bfloat16") return at::kBFloat16;
  throw UsageError(std::string(opt) + " must be fp32 or bf16, got '" + s + "'");
}

void check_threads(const CommonOptions& c) {
  if (c.threads < 0) throw UsageError("--threads must be >= 0 (0: all of this rank's cores)");
}

po::options_description accuracy_desc(AccuracyOptions& a, AccuracyArgs& raw) {
  po::options_description d("Task accuracy (exact match by greedy generation)");
  d.add_options()("accuracy-file", po::value(&a.file), "JSONL with prompts and reference answers (alpaca or samsum)")(
      "tokenizer", po::value(&a.tokenizer), "SentencePiece tokenizer.model (needed with --accuracy-file)")(
      "accuracy-format", po::value(&raw.format)->default_value("auto"), "alpaca, samsum or auto")(
      "accuracy-samples", po::value(&a.samples)->default_value(100), "first N records of the file (0: all)")(
      "max-new-tokens", po::value(&a.max_new_tokens)->default_value(32), "generation limit per answer");
  return d;
}

void check_accuracy(AccuracyOptions& a, const AccuracyArgs& raw) {
  a.format = parse_format(raw.format);
  if (a.format == DataFormat::kText) throw UsageError("--accuracy-format text has no answers to match; use alpaca or samsum");
  require_file("--accuracy-file", a.file);
  require_file("--tokenizer", a.tokenizer);
  if (!a.file.empty() && a.tokenizer.empty()) throw UsageError("--accuracy-file needs --tokenizer (the model's tokenizer.model)");
  if (a.samples < 0) throw UsageError("--accuracy-samples must be >= 0");
  positive("--max-new-tokens", static_cast<double>(a.max_new_tokens), "use 1 or more");
}

}  // namespace parts

using namespace parts;

TrainOptions parse_train(const std::vector<std::string>& args, std::string* help_text) {
  TrainOptions o;
  ModelArgs m;
  std::string schedule = "cosine", param_dtype = "fp32", on_signal = "continue";
  auto& t = o.train;
  AccuracyArgs acc;
  po::options_description data("Data");
  data.add_options()("data", po::value(&o.data), "token file made by 'shardtrain prepare' (required)")(
      "val-data", po::value(&o.val_data), "validation token file (e.g. prepare's *.val.h5)")(
      "batch-size", po::value(&t.batch_size)->default_value(8), "micro-batch size per rank (rows of seq_len)");
  po::options_description train("Training");
  train.add_options()("steps", po::value(&t.steps)->default_value(0), "optimizer steps (0: --epochs worth)")(
      "epochs", po::value(&t.epochs)->default_value(1), "epochs when --steps is 0")(
      "lr", po::value(&t.schedule.base_lr)->default_value(3e-3), "peak learning rate")(
      "lr-schedule", po::value(&schedule)->default_value("cosine"), "cosine (linear warmup + cosine), steplr (per epoch, --gamma) or constant")(
      "warmup-steps", po::value(&t.schedule.warmup_steps)->default_value(10), "linear warmup steps")(
      "min-lr-ratio", po::value(&t.schedule.min_lr_ratio)->default_value(0.1), "cosine floor as a fraction of --lr")(
      "gamma", po::value(&t.schedule.gamma)->default_value(0.85), "steplr decay per epoch (llama-recipes: 0.85)")(
      "weight-decay", po::value(&t.adamw.weight_decay)->default_value(0.1), "AdamW decoupled weight decay (not on norms)")(
      "beta1", po::value(&t.adamw.beta1)->default_value(0.9), "AdamW beta1")(
      "beta2", po::value(&t.adamw.beta2)->default_value(0.95), "AdamW beta2")(
      "adam-eps", po::value(&t.adamw.eps)->default_value(1e-8), "AdamW epsilon")(
      "grad-clip", po::value(&t.grad_clip)->default_value(1.0), "global gradient-norm clip (0: off)")(
      "grad-accum", po::value(&t.grad_accum)->default_value(1), "micro-batches per optimizer step")(
      "param-dtype", po::value(&param_dtype)->default_value("fp32"), "compute dtype: fp32 or bf16 (master weights stay fp32)")(
      "seed", po::value(&t.seed)->default_value(1234), "seed for init and data order")(
      "val-every", po::value(&t.val_every)->default_value(0), "validation every N steps (0: at the end)")(
      "val-batches", po::value(&t.val_batches)->default_value(8), "validation batches")(
      "log-every", po::value(&t.log_every)->default_value(10), "progress line every N steps")(
      "metrics-file", po::value(&t.metrics_file), "write per-step JSONL metrics here")(
      "peak-tflops", po::value(&t.peak_tflops)->default_value(0.0), "peak TFLOP/s per device for MFU (0: by device; CPU default 1.0)")(
      "save-model", po::value(&o.save_model), "write model.safetensors + config.json here at the end")(
      "checkpoint-dir", po::value(&o.checkpoint_dir), "write HDF5 checkpoints here (shared storage on a cluster)")(
      "save-every", po::value(&o.save_every)->default_value(0), "checkpoint every N steps (0: only at the end)")(
      "keep-checkpoints", po::value(&o.keep_checkpoints)->default_value(0), "keep the newest K checkpoints (0: all)")(
      "ckpt-stripe-count", po::value(&o.ckpt_stripe_count)->default_value(0), "Lustre stripe count of new checkpoints (0: default)")(
      "ckpt-stripe-size", po::value(&o.ckpt_stripe_size)->default_value(0), "Lustre stripe size in bytes, also the HDF5 alignment (0: default; 1 MiB alignment)")(
      "resume", po::value(&o.resume), "auto (newest valid checkpoint in --checkpoint-dir) or a checkpoint path")(
      "async-save", po::bool_switch(&o.async_save), "copy shards to host memory and write checkpoints on a background thread")(
      "on-signal", po::value(&on_signal)->default_value("continue"),
      "after the checkpoint SIGUSR1 asks for: continue, or exit with code 75 (for Slurm requeue)");
  std::string sharding = "full_shard", reduce_dtype = "fp32";
  po::options_description fsdp("Sharding (FSDP over MPI)");
  fsdp.add_options()("sharding", po::value(&sharding)->default_value("full_shard"),
                     "full_shard, shard_grad_op, no_shard, hybrid_shard or hybrid_shard_zero2")(
      "reduce-dtype", po::value(&reduce_dtype)->default_value("fp32"), "gradient reduction dtype: fp32 or bf16")(
      "activation-checkpointing", po::bool_switch(&o.fsdp.activation_checkpointing), "recompute each decoder layer in backward")(
      "no-sync-accumulation", po::bool_switch(&o.fsdp.no_sync_accumulation),
      "with --grad-accum: reduce once per step from unsharded fp32 grads (4 bytes x parameters more per rank)")(
      "shard-group-size", po::value(&o.fsdp.shard_group_size)->default_value(0), "hybrid: ranks per shard group (0: one node)")(
      "ranks-per-node", po::value(&o.fsdp.ranks_per_node)->default_value(0), "treat every K consecutive ranks as a node (0: ask MPI)")(
      "fail-on-rank", po::value(&o.fsdp.fail_on_rank)->default_value(-1), "fault injection for tests: rank R throws after setup")(
      "max-inflight-gathers", po::value(&o.fsdp.max_inflight_gathers)->default_value(2),
      "units gathered at once, the computing one included (2: prefetch one ahead; bounds memory)")(
      "device", po::value(&o.fsdp.device)->default_value("auto"),
      "auto (GPU local_rank % visible GPUs, else cpu), cuda (NCCL groups) or cpu (MPI groups)");
  std::string debug_sleep;
  po::options_description all;
  all.add(common_desc(o.common)).add(model_desc(m)).add(data).add(train).add(fsdp).add(accuracy_desc(o.accuracy, acc));
  all.add(observability_desc(o.obs, debug_sleep));
  parse_into(args, all);
  if (o.common.help) {
    if (help_text) *help_text = usage_text("Usage: shardtrain train --data F.h5 [options]", all);
    return o;
  }

  o.model = resolve(m);
  o.weights = m.weights;
  require_file("--weights", o.weights);
  require_file("--data", o.data);
  require_file("--val-data", o.val_data);
  check_accuracy(o.accuracy, acc);
  positive("--lr", t.schedule.base_lr, "try 3e-4 for fine-tuning");
  positive("--batch-size", static_cast<double>(t.batch_size), "use 1 or more");
  positive("--grad-accum", static_cast<double>(t.grad_accum), "use 1 or more");
  if (t.steps < 0 || t.epochs < 1) throw UsageError("--steps must be >= 0 and --epochs >= 1");
  if (schedule != "cosine" && schedule != "steplr" && schedule != "constant")
    throw UsageError("--lr-schedule must be cosine, steplr or constant, got '" + schedule + "'");
  t.schedule.kind = schedule;
  if (t.schedule.warmup_steps < 0) throw UsageError("--warmup-steps must be >= 0");
  if (t.schedule.gamma <= 0 || t.schedule.gamma > 1) throw UsageError("--gamma must be in (0, 1]");
  if (t.adamw.weight_decay < 0) throw UsageError("--weight-decay must be >= 0");
  if (t.adamw.beta1 < 0 || t.adamw.beta1 >= 1 || t.adamw.beta2 < 0 || t.adamw.beta2 >= 1)
    throw UsageError("--beta1 and --beta2 must be in [0, 1)");
  if (t.log_every < 1) throw UsageError("--log-every must be >= 1");
  check_threads(o.common);
  t.param_dtype = parse_dtype(param_dtype, "--param-dtype");
  o.fsdp.sharding = comm::parse_sharding(sharding);
  o.fsdp.reduce_dtype = parse_dtype(reduce_dtype, "--reduce-dtype");
  if (o.fsdp.ranks_per_node < 0) throw UsageError("--ranks-per-node must be >= 0 (0: ask MPI)");
  if (o.fsdp.max_inflight_gathers < 1) throw UsageError("--max-inflight-gathers must be 1 or more (1: no prefetch)");
  check_device(o.fsdp.device);
  if (o.save_every < 0 || o.keep_checkpoints < 0) throw UsageError("--save-every and --keep-checkpoints must be >= 0");
  if (o.ckpt_stripe_count < 0 || o.ckpt_stripe_size < 0) throw UsageError("--ckpt-stripe-count and --ckpt-stripe-size must be >= 0");
  if (o.resume == "auto" && o.checkpoint_dir.empty()) throw UsageError("--resume auto needs --checkpoint-dir");
  if (!o.resume.empty() && o.resume != "auto") require_file("--resume", o.resume);
  if (on_signal != "continue" && on_signal != "exit") throw UsageError("--on-signal must be continue or exit");
  o.exit_on_signal = on_signal == "exit";
  check_observability(o.obs, debug_sleep);
  o.args = args;
  if (o.data.empty()) throw UsageError("--data is required: a token file made by 'shardtrain prepare'");
  return o;
}

EvalOptions parse_eval(const std::vector<std::string>& args, std::string* help_text) {
  EvalOptions o;
  ModelArgs m;
  AccuracyArgs acc;
  po::options_description data("Loss and perplexity");
  data.add_options()("data", po::value(&o.data), "token file made by 'shardtrain prepare'")(
      "batch-size", po::value(&o.batch_size)->default_value(8), "rows per forward pass")(
      "max-batches", po::value(&o.max_batches)->default_value(0), "stop after N batches (0: all)")(
      "seed", po::value(&o.seed)->default_value(1234), "seed for the init when no --weights");
  po::options_description all;
  all.add(common_desc(o.common)).add(model_desc(m)).add(data).add(accuracy_desc(o.accuracy, acc));
  parse_into(args, all);
  if (o.common.help) {
    if (help_text) *help_text = usage_text("Usage: shardtrain eval [--data F.h5] [--accuracy-file F.jsonl --tokenizer M] [options]", all);
    return o;
  }
  o.model = resolve(m);
  o.weights = m.weights;
  require_file("--weights", o.weights);
  require_file("--data", o.data);
  check_accuracy(o.accuracy, acc);
  if (o.data.empty() && o.accuracy.file.empty())
    throw UsageError("nothing to evaluate: pass --data (loss) and/or --accuracy-file with --tokenizer (exact match)");
  positive("--batch-size", static_cast<double>(o.batch_size), "use 1 or more");
  check_threads(o.common);
  return o;
}

std::string top_level_help() {
  return "shardtrain: fully sharded fine-tuning of Llama-2 models\n\n"
         "Usage: shardtrain <command> [options]\n\n"
         "Commands:\n"
         "  prepare  tokenize JSONL (alpaca, samsum, text) into an HDF5 token file\n"
         "  train    train or fine-tune a model\n"
         "  eval     loss/perplexity on a token file, exact-match accuracy on a JSONL file\n"
         "  generate greedy or top-p text generation from a model\n"
         "  inspect  a checkpoint's tensors, state and checksum status\n"
         "  convert  checkpoint <-> Hugging Face safetensors, with any number of ranks\n"
         "  preflight  hosts, GPUs, NCCL/libfabric (EFA) and collective bandwidth, pass/fail\n"
         "  scaling  throughput and scaling efficiency across node counts from metrics files\n"
         "  report   loss, throughput and step-time breakdown charts and a summary from metrics files\n\n"
         "Run 'shardtrain <command> --help' for a command's options.\n";
}

}  // namespace shardtrain::cli
