#include "shardtrain/cli/options.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "option_parts.h"
#include "shardtrain/ckpt/checkpoint_attrs.h"
#include "shardtrain/data/tokenizer.h"
#include "shardtrain/model/family.h"
#include "shardtrain/runtime/error.h"
#include "shardtrain/runtime/logging.h"
#include "shardtrain/runtime/text.h"

namespace fs = std::filesystem;

namespace shardtrain::cli {
namespace parts {

po::options_description common_desc(CommonOptions& c) {
  po::options_description d("General");
  d.add_options()("help,h", po::bool_switch(&c.help), "show this help")(
      "help-all", po::bool_switch(&c.help_all),
      "show this help with the hidden groups (fault injection)")(
      "help-defaults", po::bool_switch(&c.help_defaults),
      "print every option's default as a markdown table (the README's)")(
      "config", po::value<std::string>(), "read more options from FILE (key = value per line)")(
      "threads", po::value(&c.threads)->default_value(c.threads),
      "LibTorch CPU threads (0: OMP_NUM_THREADS when set, as the launchers' binding sets it; else "
      "this rank's share of the cores)");
  return d;
}

po::options_description model_desc(ModelArgs& m) {
  std::string presets;
  for (const auto& n : model::model_preset_names()) presets += (presets.empty() ? "" : ", ") + n;
  po::options_description d("Model");
  d.add_options()(
      "model", po::value(&m.spec),
      ("preset (" + presets + ") or a Hugging Face config.json / model directory of model_type " +
       model::family_names() +
       " (default: the config.json beside --weights; tiny without --weights)")
          .c_str())("weights", po::value(&m.weights),
                    "safetensors file, directory or model.safetensors.index.json")(
      "n-layers", po::value(&m.n_layers), "override num_hidden_layers")(
      "hidden-size", po::value(&m.hidden), "override hidden_size")(
      "intermediate-size", po::value(&m.inter), "override intermediate_size")(
      "n-heads", po::value(&m.heads), "override num_attention_heads")(
      "n-kv-heads", po::value(&m.kv_heads), "override num_key_value_heads (GQA when < n-heads)")(
      "vocab-size", po::value(&m.vocab), "override vocab_size")(
      "max-seq-len", po::value(&m.max_pos), "override max_position_embeddings");
  return d;
}

model::ModelConfig resolve(const ModelArgs& m, const model::ModelConfig* from) {
  std::string spec = m.spec;
  if (spec.empty()) {  // --weights DIR (or a file in it) with its config.json names the model
    const fs::path w(m.weights);
    std::error_code
        ec;  // the non-throwing forms: a name too long for the OS is no config.json either
    const fs::path dir = fs::is_directory(w, ec) ? w : w.parent_path();
    if (!m.weights.empty() && !fs::exists(w, ec))  // a mistyped path: not "config.json is missing"
      throw runtime::UsageError("--weights " + m.weights +
                                " does not exist; pass a Hugging Face model directory (config.json "
                                "and its safetensors) or a safetensors file in one");
    if (!m.weights.empty() && !fs::exists(dir / "config.json", ec))
      throw runtime::UsageError("--weights " + m.weights + ": " + (dir / "config.json").string() +
                                " is missing, so the model's "
                                "architecture is unknown; put the model's config.json beside its "
                                "weights (as the Hub ships "
                                "it) or name one with --model CONFIG.json");
    spec = m.weights.empty() ? "tiny" : dir.string();
  }
  model::ModelConfig c = from ? *from : model::resolve_model(spec);
  for (const std::string& field : c.unknown_fields)
    runtime::log::warn_once(
        "--model " + c.name + ": config.json field '" + field +
        "' is not one shardtrain knows; it is " +
        "ignored (docs/models.md lists the fields and what shardtrain does with each)");
  if (m.n_layers) c.num_layers = m.n_layers;
  if (m.hidden) c.hidden_size = m.hidden;
  if (m.inter) c.intermediate_size = m.inter;
  if (m.heads) c.num_heads = m.heads;
  if (m.kv_heads) c.num_kv_heads = m.kv_heads;
  if (m.vocab) c.vocab_size = m.vocab;
  if (m.max_pos) c.max_position_embeddings = m.max_pos;
  c.validate();
  if (c.attn_softcap > 0)  // said once: no fused attention kernel soft-caps the scores
    runtime::log::info("attention: attn_logit_softcapping " + runtime::round_trip(c.attn_softcap) +
                       " runs the eager path (the [T, T] scores of a row's heads in memory; "
                       "context parallelism's blocks on their math path)");
  return c;
}

void require_weights(const std::string& command, const ModelArgs& m) {
  if (m.weights.empty())
    throw runtime::UsageError(
        command +
        " needs --weights (a Hugging Face model directory, safetensors file or index): a randomly "
        "initialized model's " +
        (command == "eval" ? "loss" : "text") +
        " means nothing. For a checkpoint, "
        "export it first: shardtrain convert --input CHECKPOINT_DIR --output MODEL_DIR");
}

void resolve_train_model(TrainOptions& o) {
  const ModelArgs& m = o.model_args;
  o.weights = m.weights;
  const auto& ck = o.ckpt;
  o.resumes = !ck.resume.empty() && !ckpt::resume_candidates(ck.resume, ck.dir).empty();
  if (!m.spec.empty() || !m.weights.empty() || !o.resumes) {
    o.model = resolve(m);
    o.model_from = !m.spec.empty()      ? "--model " + m.spec
                   : !m.weights.empty() ? "--weights"
                                        : "the default preset";
  }
}

}  // namespace parts

void resolve_checkpoint_model(TrainOptions& o) {
  if (!o.model_from.empty())
    return;  // --model, --weights or no checkpoint: parse_train resolved it
  const auto& ck = o.ckpt;
  const auto candidates = ckpt::resume_candidates(ck.resume, ck.dir);
  // A resumed run without --model or --weights is the checkpoint's model (and an adapter run's
  // recorded base): the first candidate that reads, as the resume itself falls back past a damaged
  // one.
  for (size_t i = 0; i < candidates.size(); ++i) {
    ckpt::CheckpointAttrs attrs;
    try {
      attrs = ckpt::read_attrs(candidates[i]);
    } catch (const std::exception&) {
      if (i + 1 < candidates.size()) continue;
      throw;
    }
    const model::ModelConfig saved = model::model_from_hf_json(attrs.model_config, candidates[i]);
    o.model = parts::resolve(o.model_args, &saved);
    o.model_from = "checkpoint " + candidates[i];
    o.resume_checkpoint = candidates[i];
    if (!parts::check_resume_adapters(o.run.adapters, attrs, candidates[i])) return;
    o.weights = attrs.base_weights;
    parts::require_file("--weights", o.weights);
    return;
  }
}

namespace parts {

void require_file(const std::string& opt, const std::string& path) {
  std::error_code ec;
  if (!path.empty() && !fs::exists(path, ec))
    throw runtime::UsageError(opt + ": " + path + (ec ? ": " + ec.message() : " does not exist"));
}

void require_tokenizer(const std::string& path) {
  if (!path.empty()) data::resolve_tokenizer_file(path);
}

namespace {
// Boost 1.74's error_with_option_name::what() loops forever when a substituted text contains its
// own placeholder (`--steps %value%`, `--%option%`): such input never reaches what().
bool has_placeholder(const std::string& s) {
  for (size_t a = s.find('%'); a != std::string::npos; a = s.find('%', a + 1)) {
    const size_t b = s.find('%', a + 1);
    if (b == std::string::npos) return false;
    if (b > a + 1 && std::all_of(s.begin() + a + 1, s.begin() + b, [](char c) {
          return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
        }))
      return true;
  }
  return false;
}
}  // namespace

namespace {
// Boost takes an optional value (implicit_value) only as --opt=VALUE: "--opt VALUE" would leave
// VALUE a stray token. A word after such an option, not itself an option, is its value.
std::vector<std::string> join_optional_values(const std::vector<std::string>& args,
                                              const po::options_description& all) {
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    const bool long_name =
        a.size() > 2 && a.compare(0, 2, "--") == 0 && a.find('=') == std::string::npos;
    const po::option_description* d = long_name ? all.find_nothrow(a.substr(2), false) : nullptr;
    const bool optional_value =
        d && d->semantic()->min_tokens() == 0 && d->semantic()->max_tokens() == 1;
    if (optional_value && i + 1 < args.size() && !args[i + 1].empty() && args[i + 1][0] != '-') {
      out.push_back(a + "=" + args[++i]);
      continue;
    }
    out.push_back(a);
  }
  return out;
}
}  // namespace

void parse_into(const std::vector<std::string>& raw_args, const po::options_description& all,
                const po::positional_options_description* positional,
                std::vector<std::pair<std::string, std::string>>* values,
                std::vector<std::string>* given) {
  po::variables_map vm;
  const std::vector<std::string> args = join_optional_values(raw_args, all);
  bool placeholder = std::any_of(args.begin(), args.end(), has_placeholder);
  std::string config_path;  // set while the --config file is parsed
  try {
    po::command_line_parser parser(args);
    // No allow_guessing: a prefix must not become a longer option. The config file never guesses.
    parser.options(all).style(po::command_line_style::default_style &
                              ~po::command_line_style::allow_guessing);
    if (positional) parser.positional(*positional);
    po::store(parser.run(), vm);
    if (vm.count("config")) {
      const auto path = vm["config"].as<std::string>();
      std::ifstream in(path);
      if (!in) throw runtime::UsageError("--config: cannot open " + path);
      std::ostringstream text;
      text << in.rdbuf();
      placeholder = placeholder || has_placeholder(text.str());
      std::istringstream config(text.str());
      config_path = path;
      po::store(po::parse_config_file(config, all), vm);
      config_path.clear();
    }
    po::notify(vm);
    if (values)
      for (const auto& d : all.options())
        if (vm.count(d->long_name()))
          values->emplace_back(d->long_name(), option_value_text(vm[d->long_name()].value()));
    if (given)
      for (const auto& d : all.options())
        if (vm.count(d->long_name()) && !vm[d->long_name()].defaulted())
          given->push_back(d->long_name());
  } catch (const po::error_with_option_name& e) {
    if (placeholder)
      throw runtime::UsageError(
          "option '" + e.get_option_name() +
          "' is unknown or has a bad value (its text holds a %...% sequence); see --help");
    if (dynamic_cast<const po::unknown_option*>(&e))
      throw runtime::UsageError(unknown_option_message(e.get_option_name(), all, config_path));
    throw runtime::UsageError(e.what());
  } catch (const po::error& e) {
    throw runtime::UsageError(e.what());
  }
}

namespace {
// "arg (=VALUE)" is how Boost shows a default; switches and options without one show none.
bool default_of(const po::option_description& d, std::string* value) {
  const std::string p = d.format_parameter();
  const auto at =
      p.rfind(" (=");  // the last: an implicit value shows first, "[=arg(=full)] (=none)"
  if (at == std::string::npos || p.back() != ')') return false;
  *value = p.substr(at + 3, p.size() - at - 4);
  return true;
}

std::string cell(std::string s) {  // a markdown table cell: pipes escaped
  for (size_t i = s.find('|'); i != std::string::npos; i = s.find('|', i + 2))
    s.replace(i, 1, "\\|");
  return s;
}

// --help-defaults: every option with a default, as the README's configuration table shows them.
std::string defaults_markdown(const po::options_description& all) {
  std::ostringstream os;
  os << "| option | default | meaning |\n|---|---|---|\n";
  for (const auto& d : all.options()) {
    std::string value;
    if (!default_of(*d, &value)) continue;
    os << "| `--" << d->long_name() << "` | `" << value << "` | " << cell(d->description())
       << " |\n";
  }
  return os.str();
}
}  // namespace

std::string usage_text(const CommonOptions& c, const std::string& usage,
                       const po::options_description& all) {
  if (c.help_defaults) return defaults_markdown(all);
  std::ostringstream os;
  os << usage << "\n" << all;
  return os.str();
}

void positive(const char* opt, double v, const char* hint) {
  if (!(v > 0)) {
    std::ostringstream os;
    os << opt << " must be positive, got " << v << "; " << hint;
    throw runtime::UsageError(os.str());
  }
}

void check_threads(const CommonOptions& c) {
  if (c.threads < 0)
    throw runtime::UsageError("--threads must be >= 0 (0: all of this rank's cores)");
}

po::options_description fsdp_desc(fsdp::ShardingConfig& f, model::RunPlan& run,
                                  int& context_parallel, FsdpArgs& raw, bool training) {
  po::options_description d("Sharding and precision (FSDP)");
  raw.sharding = fsdp::sharding_name(f.sharding);
  d.add_options()("sharding", po::value(&raw.sharding)->default_value(raw.sharding),
                  runtime::enum_choices(fsdp::kShardingNames).c_str())(
      "ranks-per-node", po::value(&f.ranks_per_node)->default_value(f.ranks_per_node),
      "treat every K consecutive ranks as a node (0: ask MPI)")(
      "device", po::value(&f.device)->default_value(f.device),
      "auto (the GPU of the rank's place among the ranks on its machine, else cpu), cuda (NCCL "
      "groups) or cpu (MPI groups)")(
      "no-tf32", po::bool_switch(&raw.no_tf32),
      "CUDA: keep fp32 matmuls in full fp32 (TF32 tensor cores are on by default)")(
      "fused-layers", po::bool_switch(&run.fused_layers),
      "decoder layers through the fused path: LibTorch's fused RMSNorm, q/k/v and gate/up each one "
      "matmul, and on CUDA shardtrain's rotary and SwiGLU kernels (bf16 results within rounding "
      "of the default path; docs/gpu.md)");
  spec::add_layout_options(d, f, context_parallel, raw.spec, training);
  return d;
}

void check_fsdp(fsdp::ShardingConfig& f, model::RunPlan& run, const FsdpArgs& raw, bool training) {
  f.sharding = fsdp::parse_sharding(raw.sharding);
  run.tf32 = !raw.no_tf32;
  spec::resolve_layout(f, run, raw.spec, training);
  f.validate();
}

po::options_description accuracy_desc(train::AccuracyConfig& a, AccuracyArgs& raw) {
  po::options_description d("Task accuracy (exact match by greedy generation)");
  raw.format = data::format_name(a.format);
  d.add_options()("accuracy-file", po::value(&a.file),
                  "JSONL with prompts and reference answers (alpaca or samsum)")(
      "tokenizer", po::value(&a.tokenizer),
      (std::string(kTokenizerHelp) +
       " (needed with --accuracy-file; train's --save-model export also carries it)")
          .c_str())("accuracy-format", po::value(&raw.format)->default_value(raw.format),
                    "alpaca, samsum or auto")("accuracy-samples",
                                              po::value(&a.samples)->default_value(a.samples),
                                              "first N records of the file (0: all)")(
      "max-new-tokens", po::value(&a.max_new_tokens)->default_value(a.max_new_tokens),
      "generation limit per answer");
  return d;
}

void check_accuracy(train::AccuracyConfig& a, const AccuracyArgs& raw) {
  a.format = data::parse_format(raw.format);
  if (a.format == data::DataFormat::kText || a.format == data::DataFormat::kChat)
    throw runtime::UsageError("--accuracy-format " + raw.format +
                              " has no single answer to match; use alpaca or samsum");
  require_file("--accuracy-file", a.file);
  require_tokenizer(a.tokenizer);
  if (!a.file.empty() && a.tokenizer.empty())
    throw runtime::UsageError(
        "--accuracy-file needs --tokenizer (the model's tokenizer.json or tokenizer.model, or its "
        "directory)");
  if (a.samples < 0) throw runtime::UsageError("--accuracy-samples must be >= 0");
  positive("--max-new-tokens", static_cast<double>(a.max_new_tokens), "use 1 or more");
}

}  // namespace parts

using namespace parts;

TrainOptions parse_train(const std::vector<std::string>& args, std::string* help_text) {
  TrainOptions o;
  ModelArgs& m = o.model_args;
  FsdpArgs fa;
  AccuracyArgs acc;
  AdapterArgs adapters;
  PreferenceArgs pref;
  std::string debug_sleep, debug_nan;
  RunControlArgs run;
  auto& t = o.train;
  auto& op = o.optim;
  auto& ck = o.ckpt;
  po::options_description data("Data");
  data.add_options()("data", po::value(&o.data),
                     "token file made by 'shardtrain prepare' (required)")(
      "val-data", po::value(&o.val_data), "validation token file (e.g. prepare's *.val.h5)");
  add_adapter_init(data, adapters);
  po::options_description train("Training");
  spec::add_batch_options(train, t.batch_size, t.grad_accum);
  train.add_options()("steps", po::value(&t.steps)->default_value(t.steps),
                      "optimizer steps (0: --epochs worth); a resume at another global batch "
                      "counts them in the first "
                      "run's global batches, so it trains the same rows")(
      "epochs", po::value(&t.epochs)->default_value(t.epochs), "epochs when --steps is 0")(
      "seed", po::value(&t.seed)->default_value(t.seed), "seed for init and data order")(
      "val-every", po::value(&t.val_every)->default_value(t.val_every),
      "validation every N steps (0: at the end)")(
      "val-batches", po::value(&t.val_batches)->default_value(t.val_batches), "validation batches")(
      "log-every", po::value(&t.log_every)->default_value(t.log_every),
      "progress line every N steps")(
      "breakdown-every", po::value(&t.breakdown_every)->default_value(t.breakdown_every),
      "the step-time breakdown across ranks with every Nth progress line, and at the end (0: only "
      "at the end)")("metrics-file", po::value(&t.metrics_file),
                     "write per-step JSONL metrics here")(
      "log-sample-ids", po::value(&t.sample_ids_file),
      "debug: append each step's global batch (epoch and token-file rows, in order) to this JSONL "
      "(rank 0)")("peak-tflops", real(&t.peak_tflops, t.peak_tflops),
                  "peak TFLOP/s per device for MFU (0: by device; CPU default 1.0)")(
      "save-model", po::value(&o.save_model),
      "write model.safetensors + config.json here at the end")(
      "profile-step", po::value(&t.profile_step)->default_value(t.profile_step),
      "profile this optimizer step with LibTorch's profiler (host ops; CUDA kernels on a GPU): top "
      "kernels and the "
      "shares of GEMM, attention, elementwise, optimizer, communication and gaps (0: off; 3 or "
      "later skips warm-up)")("profile-dir",
                              po::value(&t.profile_dir)->default_value(t.profile_dir),
                              "--profile-step's output: trace-rankR.json (chrome://tracing, "
                              "Perfetto) and profile-rankR.md per rank");
  po::options_description optim("Optimizer (AdamW) and learning rate");
  optim.add_options()(
      "lr", real(&op.schedule.base_lr, op.schedule.base_lr),
      "peak learning rate (the default is a fine-tuning rate for pretrained weights)")(
      "lr-schedule", po::value(&op.schedule.kind)->default_value(op.schedule.kind),
      "cosine (linear warmup + cosine), steplr (per epoch, --gamma) or constant")(
      "warmup-steps", po::value(&op.schedule.warmup_steps)->default_value(op.schedule.warmup_steps),
      "linear warmup steps")(
      "min-lr-ratio", real(&op.schedule.min_lr_ratio, op.schedule.min_lr_ratio),
      "cosine floor as a fraction of --lr")("gamma", real(&op.schedule.gamma, op.schedule.gamma),
                                            "steplr decay per epoch (llama-recipes: 0.85)")(
      "weight-decay", real(&op.adamw.weight_decay, op.adamw.weight_decay),
      "AdamW decoupled weight decay (not on norms)")("beta1", real(&op.adamw.beta1, op.adamw.beta1),
                                                     "AdamW beta1")(
      "beta2", real(&op.adamw.beta2, op.adamw.beta2), "AdamW beta2")(
      "adam-eps", real(&op.adamw.eps, op.adamw.eps), "AdamW epsilon")(
      "grad-clip", real(&op.grad_clip, op.grad_clip), "global gradient-norm clip (0: off)");
  po::options_description ckpt("Checkpoints");
  ckpt.add_options()("checkpoint-dir", po::value(&ck.dir),
                     "write HDF5 checkpoints here (shared storage on a cluster)")(
      "save-every", po::value(&ck.save_every)->default_value(ck.save_every),
      "checkpoint every N steps (0: only at the end)")("keep-checkpoints",
                                                       po::value(&ck.keep)->default_value(ck.keep),
                                                       "keep the newest K checkpoints (0: all)")(
      "resume", po::value(&ck.resume),
      "auto (the checkpoint --checkpoint-dir's `latest` names; an older one only if that one is "
      "corrupt), a checkpoint "
      "file, or a checkpoint directory (its `latest`). Without --model and --weights, the model is "
      "the checkpoint's")(
      "overwrite-checkpoints", po::bool_switch(&ck.overwrite),
      "start a new run in a --checkpoint-dir that holds another run's checkpoints, removing them")(
      "allow-data-change", po::bool_switch(&ck.allow_data_change),
      "let --resume continue on another --seed or token file than the checkpoint's (from the same "
      "row of the epoch)")(
      "async-save", po::bool_switch(&ck.async),
      "copy shards to host memory and write checkpoints on a background thread")(
      "ckpt-stripe-count", po::value(&ck.stripe.count)->default_value(ck.stripe.count),
      "Lustre stripe count of new checkpoints (0: default)")(
      "ckpt-stripe-size", po::value(&ck.stripe.size)->default_value(ck.stripe.size),
      "Lustre stripe size in bytes, also the HDF5 alignment (0: default; 1 MiB alignment)");
  po::options_description faults("Fault injection (tests)");
  faults.add_options()("fail-on-rank",
                       po::value(&o.faults.fail_on_rank)->default_value(o.faults.fail_on_rank),
                       "rank R throws after setup")(
      "debug-sleep", po::value(&debug_sleep),
      "RANK:STEP:SECONDS sleeps that rank before that step (STEP 0: every step)")(
      "debug-nan", po::value(&debug_nan),
      "RANK:STEP[:nan|inf] plants a NaN (or Inf) in that rank's gradient after backward (STEP 0: "
      "every step)");
  po::options_description visible;
  visible.add(common_desc(o.common))
      .add(model_desc(m))
      .add(data)
      .add(train)
      .add(optim)
      .add(fsdp_desc(o.fsdp, o.run, o.context_parallel, fa, true));
  visible.add(adapter_desc(o.run.adapters, adapters));
  visible.add(preference_desc(o.preference, pref));
  visible.add(ckpt)
      .add(run_control_desc(t, run))
      .add(accuracy_desc(o.accuracy, acc))
      .add(observability_desc(o.obs));
  po::options_description all;
  all.add(visible).add(faults);
  parse_into(args, all, nullptr, &o.option_values);
  // A resume may change these, saying so in one line each (DPO's reference it refuses: run_config).
  const auto said = [&o](const std::string& name) {
    for (const auto& [n, value] : o.option_values)
      if (n == name) o.resume_said[name] = value;
  };
  for (const auto& d : optim.options()) said(d->long_name());
  if (pref.objective == "dpo")
    for (const char* name : {"dpo-beta", "dpo-loss"}) said(name);
  if (o.common.wants_help()) {
    if (help_text)
      *help_text = usage_text(o.common, "Usage: shardtrain train --data F.h5 [options]",
                              o.common.help_all ? all : visible);
    return o;
  }
  if (!ck.resume.empty() && ck.resume != "auto")
    ck.resume = ckpt::resolve_checkpoint(ck.resume, "--resume");
  resolve_train_model(o);
  require_file("--weights", o.weights);
  require_file("--data", o.data);
  require_file("--val-data", o.val_data);
  check_accuracy(o.accuracy, acc);
  positive("--lr", op.schedule.base_lr,
           ("try " + round_trip(optim::LrSchedule{}.base_lr) + " (the default) for fine-tuning")
               .c_str());
  t.validate();
  op.validate();
  check_threads(o.common);
  check_adapters(o.run.adapters, adapters);
  o.adapter_init = adapters.init;
  o.merge_adapters = adapters.merge;
  check_preference(o.preference, pref);
  if (o.preference.enabled && !o.preference.val_reference_logps.empty() && o.val_data.empty())
    throw runtime::UsageError("--val-reference-logps needs --val-data");
  check_fsdp(o.fsdp, o.run, fa, /*training=*/true);
  check_run_control(t, run);
  ck.validate();
  o.obs.validate();
  o.obs.resolve_run_name(ck.dir);
  check_debug_sleep(o.faults, debug_sleep);
  check_debug_nan(o.faults, debug_nan);
  o.args = args;
  if (o.data.empty())
    throw runtime::UsageError("--data is required: a token file made by 'shardtrain prepare'");
  return o;
}

EvalOptions parse_eval(const std::vector<std::string>& args, std::string* help_text) {
  EvalOptions o;
  ModelArgs m;
  FsdpArgs fa;
  AccuracyArgs acc;
  PreferenceArgs pref;
  po::options_description data("Loss and perplexity");
  data.add_options()("data", po::value(&o.data), "token file made by 'shardtrain prepare'")(
      "batch-size", po::value(&o.batch_size)->default_value(o.batch_size),
      "rows per forward pass, across all ranks")(
      "max-batches", po::value(&o.max_batches)->default_value(o.max_batches),
      "stop after N batches (0: all)")(
      "save-logits", po::value(&o.save_logits),
      "write the first --batch-size rows of --data and their fp32 logits to this HDF5 file")(
      "save-logps", po::value(&o.save_logps),
      "write each row's summed answer log-probability of --data to this HDF5 file (train "
      "--reference-logps: DPO without a reference model)");
  add_adapter_dir(data, o.adapter);
  po::options_description all;
  all.add(common_desc(o.common))
      .add(model_desc(m))
      .add(data)
      .add(preference_desc(o.preference, pref, /*with_val=*/false))
      .add(accuracy_desc(o.accuracy, acc))
      .add(fsdp_desc(o.fsdp, o.run, o.context_parallel, fa, false));
  parse_into(args, all);
  if (o.common.wants_help()) {
    if (help_text)
      *help_text = usage_text(o.common,
                              "Usage: [mpirun -np N] shardtrain eval [--data F.h5] "
                              "[--accuracy-file F.jsonl --tokenizer M] [options]",
                              all);
    return o;
  }
  o.model = resolve(m);
  require_weights("eval", m);
  o.weights = m.weights;
  require_file("--weights", o.weights);
  require_file("--data", o.data);
  check_accuracy(o.accuracy, acc);
  if (!o.adapter.empty()) o.run.adapters = read_adapter_config(o.adapter);
  if (o.data.empty() && o.accuracy.file.empty())
    throw runtime::UsageError(
        "nothing to evaluate: pass --data (loss) and/or --accuracy-file with --tokenizer (exact "
        "match)");
  if (!o.save_logits.empty() && o.data.empty())
    throw runtime::UsageError("--save-logits needs --data (the rows to run)");
  if (!o.save_logps.empty() && o.data.empty())
    throw runtime::UsageError("--save-logps needs --data (the rows to run)");
  check_preference(o.preference, pref);
  if (o.preference.enabled && o.data.empty())
    throw runtime::UsageError("--objective dpo needs --data (a token file of preference pairs)");
  if (o.preference.enabled && o.preference.reference_logps.empty() && o.adapter.empty())
    throw runtime::UsageError(
        "eval --objective dpo needs the reference model's log-probabilities: --reference-logps "
        "FILE (run 'shardtrain eval --weights REFERENCE --data " +
        o.data + " --save-logps FILE' first), or " + kAdapterDirOption +
        " DIR (the base is the reference)");
  positive("--batch-size", static_cast<double>(o.batch_size), "use 1 or more");
  check_threads(o.common);
  check_fsdp(o.fsdp, o.run, fa, /*training=*/false);
  return o;
}

std::string top_level_help() {
  return "shardtrain: fully sharded fine-tuning of Llama-family models (Llama-2 and 3.x, Mistral, "
         "Qwen2)\n\n"
         "Usage: shardtrain <command> [options]\n\n"
         "Commands:\n"
         "  prepare  tokenize JSONL (alpaca, samsum, text; chat messages with --format chat) into "
         "an HDF5 token file\n"
         "  tokenize print the token ids of {\"text\": ...} JSONL lines, one JSON array per line\n"
         "  train    train or fine-tune a model\n"
         "  eval     loss/perplexity on a token file (DPO's metrics on preference pairs), "
         "exact-match accuracy on a JSONL file\n"
         "  generate greedy or top-p text generation from a model\n"
         "  inspect  a checkpoint's tensors, state and checksum status\n"
         "  convert  checkpoint <-> Hugging Face safetensors, with any number of ranks\n"
         "  preflight  hosts, GPUs, NCCL/libfabric (EFA) and collective bandwidth, pass/fail\n"
         "  scaling  throughput and scaling efficiency across node counts from metrics files\n"
         "  plan     memory per rank, fit and step time for a model across node counts and "
         "strategies\n"
         "  report   loss, throughput and step-time breakdown charts and a summary from metrics "
         "files\n\n"
         "Run 'shardtrain <command> --help' for a command's options.\n";
}

}  // namespace shardtrain::cli
