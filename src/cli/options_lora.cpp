// LoRA's options: train's --lora-* settings, and eval/generate's --lora DIR (a PEFT adapter).
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "option_parts.h"
#include "shardtrain/runtime/error.h"

namespace fs = std::filesystem;

namespace shardtrain::cli::parts {

po::options_description lora_desc(model::LoraConfig& l, LoraArgs& raw) {
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

void check_lora(model::LoraConfig& l, const LoraArgs& raw) {
  l.targets = model::parse_lora_targets(raw.targets);
  l.validate();
  if (raw.merge && !l.enabled()) throw runtime::UsageError("--merge-lora needs --lora-rank > 0");
}

}  // namespace shardtrain::cli::parts
