// LoRA's options: train's --lora-* settings, and eval/generate's --lora DIR (a PEFT adapter).
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "option_parts.h"
#include "shardtrain/runtime/error.h"

namespace fs = std::filesystem;

namespace shardtrain::cli::parts {

po::options_description adapter_desc(model::LoraConfig& l, AdapterArgs& raw) {
  po::options_description d("LoRA (parameter-efficient fine-tuning; the base stays frozen)");
  raw.targets = model::join_lora_targets(l.targets);
  d.add_options()("lora-rank", po::value(&l.rank)->default_value(l.rank),
                  "adapter rank r (0: off, full fine-tuning)")(
      "lora-alpha", real(&l.alpha, l.alpha),
      "scaling alpha; the adapter's output is scaled by alpha/r")(
      "lora-dropout", real(&l.dropout, l.dropout), "dropout on the adapters' input, in [0, 1)")(
      "lora-targets", po::value(&raw.targets)->default_value(raw.targets),
      "comma-separated projections: q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj")(
      "merge-lora", po::bool_switch(&raw.merge),
      "with --save-model: write merged full weights instead of the adapter");
  return d;
}

void add_adapter_init(po::options_description& d, AdapterArgs& raw) {
  d.add_options()(
      "lora-init", po::value(&raw.init),
      "start LoRA from this PEFT adapter (adapter_config.json + adapter_model.safetensors): its "
      "rank, alpha, targets and dropout");
}

void check_adapters(model::LoraConfig& l, const AdapterArgs& raw) {
  l.targets = model::parse_lora_targets(raw.targets);
  l.validate();
  if (!raw.init.empty()) {
    const model::LoraConfig init = read_adapter_config(raw.init, "--lora-init");
    if (l.enabled() && l.rank != init.rank)
      throw runtime::UsageError("--lora-rank " + std::to_string(l.rank) + " but --lora-init " +
                                raw.init + " has rank " + std::to_string(init.rank) +
                                "; drop --lora-rank");
    l = init;
    l.dropout = exports::adapter_dropout(raw.init);  // PEFT trains it with its own
  }
  if (raw.merge && !l.enabled()) throw runtime::UsageError("--merge-lora needs --lora-rank > 0");
}

void add_adapter_dir(po::options_description& d, std::string& dir) {
  d.add_options()(kAdapterDirOption + 2, po::value(&dir),
                  "apply this PEFT LoRA adapter (adapter_config.json + adapter_model.safetensors)");
}

void add_convert_adapters(po::options_description& d, std::string& weights, bool& merge) {
  d.add_options()("weights", po::value(&weights),
                  "a LoRA checkpoint's base (default: the path it records)")(
      "merge-lora", po::bool_switch(&merge),
      "a LoRA checkpoint: write merged full weights, not the PEFT adapter");
}

bool check_resume_adapters(const model::LoraConfig& run, const ckpt::CheckpointAttrs& saved,
                           const std::string& path) {
  if (saved.lora_rank == 0) return false;
  if (run.rank != saved.lora_rank)
    throw runtime::UsageError(
        "--resume: " + path + " was trained with LoRA (--lora-rank " +
        std::to_string(saved.lora_rank) + " --lora-alpha " + round_trip(saved.lora_alpha) +
        " --lora-targets " + saved.lora_targets + "); pass the same --lora-* options to resume it");
  return true;
}

}  // namespace shardtrain::cli::parts
