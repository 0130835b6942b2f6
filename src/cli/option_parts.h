// Pieces shared by every command's option description (internal to src/cli).
#pragma once
#include <ATen/core/ScalarType.h>

#include <boost/program_options.hpp>
#include <string>
#include <vector>

#include "shardtrain/ckpt/checkpoint_attrs.h"
#include "shardtrain/cli/options.h"
#include "shardtrain/exports/peft_export.h"
#include "shardtrain/runtime/text.h"
#include "shardtrain/spec/option_text.h"
#include "shardtrain/spec/spec_options.h"

namespace shardtrain::cli::parts {

namespace po = boost::program_options;

po::options_description common_desc(CommonOptions& c);
po::options_description model_desc(ModelArgs& m);
// The model config: `from` (a checkpoint's) or --model / --weights' config.json, then the
// overrides.
model::ModelConfig resolve(const ModelArgs& m, const model::ModelConfig* from = nullptr);
// eval and generate refuse to run a random model: they need --weights.
void require_weights(const std::string& command, const ModelArgs& m);
// train's model and weights as given (or the default preset); left unresolved (model_from
// empty) for resolve_checkpoint_model when resuming without either.
void resolve_train_model(TrainOptions& o);

struct AccuracyArgs {
  std::string format;  // accuracy_desc sets it from AccuracyConfig's default
};
po::options_description accuracy_desc(train::AccuracyConfig& a, AccuracyArgs& raw);
void check_accuracy(train::AccuracyConfig& a, const AccuracyArgs& raw);

// The sharding group of train, eval and generate (training adds the backward's options): the
// options plan shares come from spec::add_layout_options.
struct FsdpArgs {
  std::string sharding;  // fsdp_desc sets it from ShardingConfig's default
  bool no_tf32 = false;
  spec::SpecArgs spec;
};
// run: what each unit computes (--fused-layers, --fp8, --loss-chunk, --no-tf32); context_parallel:
// the mesh's context dimension.
po::options_description fsdp_desc(fsdp::ShardingConfig& f, model::RunPlan& run,
                                  int& context_parallel, FsdpArgs& raw, bool training);
void check_fsdp(fsdp::ShardingConfig& f, model::RunPlan& run, const FsdpArgs& raw, bool training);

// LoRA's options, all declared in options_lora.cpp. train's --lora-* and --lora-init;
// check_adapters parses raw.targets and reads raw.init's adapter_config.json into l.
struct AdapterArgs {
  std::string targets;  // adapter_desc sets it from LoraConfig's default
  std::string init;     // --lora-init: a PEFT adapter to start from
  bool merge = false;
};
po::options_description adapter_desc(model::LoraConfig& l, AdapterArgs& raw);
void add_adapter_init(po::options_description& d, AdapterArgs& raw);  // in train's Data group
void check_adapters(model::LoraConfig& l, const AdapterArgs& raw);
// eval's and generate's --lora DIR (a PEFT adapter to apply); read_adapter_config reads its
// settings (dropout 0).
inline constexpr const char* kAdapterDirOption = "--lora";
void add_adapter_dir(po::options_description& d, std::string& dir);
using exports::read_adapter_config;
// convert's --weights (a LoRA checkpoint's base) and --merge-lora.
void add_convert_adapters(po::options_description& d, std::string& weights, bool& merge);
// train --resume of checkpoint `path` whose attributes are `saved`: false for a full fine-tune's;
// true for one with adapters, after checking that this run's --lora-* are its settings.
bool check_resume_adapters(const model::LoraConfig& run, const ckpt::CheckpointAttrs& saved,
                           const std::string& path);

// train's and eval's --objective and the DPO settings; check_preference reads raw.objective and
// raw.loss. with_val: train's --val-reference-logps.
struct PreferenceArgs {
  std::string objective = "sft", loss;
};
po::options_description preference_desc(PreferenceOptions& p, PreferenceArgs& raw,
                                        bool with_val = true);
void check_preference(PreferenceOptions& p, const PreferenceArgs& raw);

void require_file(const std::string& opt, const std::string& path);
// --tokenizer: empty, or a path that names a tokenizer file (data::resolve_tokenizer_file's
// UsageError otherwise).
void require_tokenizer(const std::string& path);
// Every command's --tokenizer takes the same kinds of path (data::resolve_tokenizer_file).
inline constexpr const char* kTokenizerHelp =
    "SentencePiece .model, Hugging Face tokenizer.json, or a model directory holding one";
using runtime::round_trip;
using spec::option_value_text;
using spec::real;
using spec::unknown_option_message;
// Parses args, then --config FILE, into the variables bound by `all`. values: when given, every
// option that has a value (typed, from --config, or its default) as option name -> text.
void parse_into(const std::vector<std::string>& args, const po::options_description& all,
                const po::positional_options_description* positional = nullptr,
                std::vector<std::pair<std::string, std::string>>* values = nullptr,
                std::vector<std::string>* given = nullptr);
std::string usage_text(const CommonOptions& c, const std::string& usage,
                       const po::options_description& all);
void positive(const char* opt, double v, const char* hint);
using spec::dtype_name;
using spec::parse_dtype;
void check_threads(const CommonOptions& c);

po::options_description observability_desc(obs::ObsConfig& o);
void check_debug_sleep(train::FaultConfig& f, const std::string& debug_sleep);  // RANK:STEP:SECONDS

// train's --on-signal, --on-nonfinite and --max-nonfinite-steps.
struct RunControlArgs {
  std::string on_signal = "continue", on_nonfinite = "stop";
};
po::options_description run_control_desc(train::TrainConfig& t, RunControlArgs& raw);
void check_run_control(train::TrainConfig& t, const RunControlArgs& raw);
void check_debug_nan(train::FaultConfig& f, const std::string& spec);  // RANK:STEP[:nan|inf]

}  // namespace shardtrain::cli::parts
