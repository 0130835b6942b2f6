#include "shardtrain/spec/option_text.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "shardtrain/runtime/text.h"

namespace shardtrain::spec {
namespace {

// Flags of PyTorch scripts, llama-recipes and Hugging Face's Trainer, with dashes for
// underscores, and what to pass to shardtrain instead. The first --option named must exist in
// the command for the advice to apply. They are advice in the error, never aliases.
struct Foreign {
  const char* flag;
  const char* advice;
};
constexpr Foreign kForeign[] = {
    {"learning-rate", "shardtrain's equivalent is --lr"},
    {"max-steps", "shardtrain's equivalent is --steps"},
    {"gradient-accumulation-steps", "shardtrain's equivalent is --grad-accum"},
    {"bf16", "shardtrain's equivalent is --param-dtype bf16"},
    {"pure-bf16", "shardtrain's equivalent is --param-dtype bf16"},
    {"fp16", "shardtrain does not train in fp16: bf16 (--param-dtype bf16) is what it supports"},
    {"per-device-train-batch-size",
     "shardtrain's equivalent is --batch-size (rows per rank; pairs under --objective dpo)"},
    {"batch-size-training", "shardtrain's equivalent is --batch-size (rows per rank)"},
    {"num-train-epochs", "shardtrain's equivalent is --epochs"},
    {"num-epochs", "shardtrain's equivalent is --epochs"},
    {"logging-steps", "shardtrain's equivalent is --log-every"},
    {"save-steps", "shardtrain's equivalent is --save-every"},
    {"eval-steps", "shardtrain's equivalent is --val-every"},
    {"save-total-limit", "shardtrain's equivalent is --keep-checkpoints"},
    {"max-grad-norm", "shardtrain's equivalent is --grad-clip"},
    {"lr-scheduler-type", "shardtrain's equivalent is --lr-schedule"},
    {"warmup-ratio",
     "shardtrain's equivalent is --warmup-steps (a number of steps, not a fraction of the run)"},
    {"adam-beta1", "shardtrain's equivalent is --beta1"},
    {"adam-beta2", "shardtrain's equivalent is --beta2"},
    {"adam-epsilon", "shardtrain's equivalent is --adam-eps"},
    {"gradient-checkpointing", "shardtrain's equivalent is --activation-checkpointing"},
    {"model-name-or-path",
     "shardtrain's equivalent is --weights DIR (a Hugging Face model directory)"},
    {"model-name", "shardtrain's equivalent is --weights DIR (a Hugging Face model directory)"},
    {"output-dir",
     "shardtrain's equivalent is --save-model DIR (the final model) or --checkpoint-dir DIR "
     "(checkpoints)"},
    {"resume-from-checkpoint", "shardtrain's equivalent is --resume (auto, or a checkpoint)"},
    {"use-peft", "shardtrain's equivalent is --lora-rank R (R > 0)"},
    {"lora-target-modules", "shardtrain's equivalent is --lora-targets"},
    {"target-modules", "shardtrain's equivalent is --lora-targets"},
    // TRL's DPOConfig and SFTConfig. --beta alone would suggest AdamW's --beta1/--beta2.
    {"beta", "shardtrain's equivalent is --dpo-beta (AdamW's betas are --beta1 and --beta2)"},
    {"loss-type", "shardtrain's equivalent is --dpo-loss (sigmoid or ipo)"},
    {"precompute-ref-log-probs",
     "shardtrain's equivalent is --reference-logps FILE (written by eval --save-logps)"},
    // A row's length is prepare's (and plan's) --seq-len; train takes the rows --data holds.
    {"max-length", "shardtrain's equivalent is --seq-len (tokens per row, prompt and answer)"},
    {"max-length", "--data's rows keep the length they were prepared with (prepare --seq-len)"},
    {"max-seq-length", "shardtrain's equivalent is --seq-len (tokens per row)"},
    {"max-seq-length", "--data's rows keep the length they were prepared with (prepare --seq-len)"},
};

// "did you mean --a?" or "did you mean --a, --b or --c?"
std::string did_you_mean(const std::vector<std::string>& names, const std::string& dash) {
  std::string s = "did you mean ";
  for (size_t i = 0; i < names.size(); ++i)
    s += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + dash + names[i];
  return s + "?";
}

// What to suggest for `name` (no dashes, '_' already '-') among the command's long options.
std::string suggestion(const std::string& name, const std::vector<std::string>& options,
                       const po::options_description& all, const std::string& dash) {
  for (const Foreign& f : kForeign) {
    if (name != f.flag) continue;
    const std::string advice = f.advice;
    const size_t at = advice.find("--");
    const std::string target = advice.substr(at + 2, advice.find_first_of(" ,)'", at) - at - 2);
    if (all.find_nothrow(target, false)) return advice;
  }
  if (std::find(options.begin(), options.end(), name) != options.end())
    return did_you_mean({name}, dash);  // --max_new_tokens
  std::vector<std::string> longer;
  for (const auto& o : options)
    if (name.size() >= 2 && o.compare(0, name.size(), name) == 0) longer.push_back(o);
  if (!longer.empty() && longer.size() <= 4)
    return did_you_mean(longer, dash) + " (options are not abbreviated)";
  const size_t close = std::max<size_t>(1, name.size() / 3);
  size_t best = close + 1;
  std::string nearest;
  for (const auto& o : options)
    if (const size_t d = runtime::edit_distance(name, o); d < best && d < name.size()) {
      best = d;
      nearest = o;
    }
  return nearest.empty() ? "" : did_you_mean({nearest}, dash);
}

}  // namespace

po::typed_value<double>* real(double* target, double default_value) {
  return po::value(target)->default_value(default_value, runtime::round_trip(default_value));
}

std::string unknown_option_message(const std::string& typed, const po::options_description& all,
                                   const std::string& config) {
  std::string name = typed.substr(0, typed.find('='));  // --lrr=3: the name alone
  const bool is_short = name.size() == 2 && name[0] == '-' && name[1] != '-';
  name.erase(0, name.find_first_not_of('-'));
  const std::string dash = config.empty() ? "--" : "";  // a config file's keys have no dashes
  const std::string where = config.empty() ? "" : "--config " + config + ": ";
  const std::string head = where + "unknown option " + (is_short ? "-" : dash) + name;
  std::replace(name.begin(), name.end(), '_', '-');
  std::vector<std::string> options;
  for (const auto& o : all.options())
    if (!o->long_name().empty()) options.push_back(o->long_name());
  const std::string hint = is_short ? "" : suggestion(name, options, all, dash);
  return head + "; " + (hint.empty() ? "see --help for this command's options" : hint);
}

std::string option_value_text(const boost::any& v) {
  if (const auto* x = boost::any_cast<std::string>(&v)) return *x;
  if (const auto* x = boost::any_cast<bool>(&v)) return *x ? "true" : "false";
  if (const auto* x = boost::any_cast<double>(&v)) return runtime::round_trip(*x);
  if (const auto* x = boost::any_cast<int>(&v)) return std::to_string(*x);
  if (const auto* x = boost::any_cast<long>(&v)) return std::to_string(*x);
  if (const auto* x = boost::any_cast<long long>(&v)) return std::to_string(*x);
  if (const auto* x = boost::any_cast<unsigned>(&v)) return std::to_string(*x);
  if (const auto* x = boost::any_cast<unsigned long>(&v)) return std::to_string(*x);
  if (const auto* x = boost::any_cast<unsigned long long>(&v)) return std::to_string(*x);
  if (const auto* x = boost::any_cast<std::vector<std::string>>(&v)) {
    std::string out;
    for (const auto& e : *x) out += (out.empty() ? "" : ",") + e;
    return out;
  }
  return "";
}

}  // namespace shardtrain::spec
