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

double adapter_dropout(const std::string& dir) {
  read_adapter_config(dir, "--lora-init");  // the checks
  nlohmann::json j;
  std::ifstream(fs::path(dir) / "adapter_config.json") >> j;
  const double d = j.value("lora_dropout", 0.0);
  if (d < 0 || d >= 1)
    throw runtime::UsageError("--lora-init: " + dir + "/adapter_config.json has lora_dropout " +
                              std::to_string(d) + "; it must be in [0, 1)");
  return d;
}

model::LoraConfig read_adapter_config(const std::string& dir, const std::string& opt) {
  const fs::path cfg = fs::path(dir) / "adapter_config.json",
                 weights = fs::path(dir) / "adapter_model.safetensors";
  std::error_code ec;
  if (!fs::exists(cfg, ec) || !fs::exists(weights, ec))
    throw runtime::UsageError(
        opt + ": " + dir +
        " needs adapter_config.json and adapter_model.safetensors (a PEFT adapter)");
  nlohmann::json j;
  try {
    std::ifstream(cfg) >> j;
  } catch (const std::exception& e) {
    throw runtime::UsageError(opt + ": cannot parse " + cfg.string() + ": " + e.what());
  }
  if (j.value("peft_type", "") != "LORA" || j.value("use_dora", false) ||
      j.value("use_rslora", false) || !j.value("rank_pattern", nlohmann::json::object()).empty() ||
      !j.value("alpha_pattern", nlohmann::json::object()).empty())
    throw runtime::UsageError(
        opt + ": " + cfg.string() +
        " is not a plain LoRA adapter (peft_type LORA, no DoRA/rsLoRA/patterns)");
  model::LoraConfig l;
  l.rank = j.at("r").get<int64_t>();
  l.alpha = j.at("lora_alpha").get<double>();
  l.dropout = 0;  // inference
  l.targets.clear();
  for (const auto& t : j.at("target_modules")) l.targets.push_back(t.get<std::string>());
  // PEFT stores the targets as a set; shardtrain's order is the layer's.
  std::vector<std::string> ordered;
  for (model::Proj p : model::kProjections)
    if (std::find(l.targets.begin(), l.targets.end(), model::proj_name(p)) != l.targets.end())
      ordered.push_back(model::proj_name(p));
  if (ordered.size() != l.targets.size())
    throw runtime::UsageError(opt + ": " + cfg.string() +
                              " targets modules shardtrain does not know");
  l.targets = ordered;
  l.validate();
  return l;
}

}  // namespace shardtrain::cli::parts
