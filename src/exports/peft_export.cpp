// A low-rank adapter run's outputs: the adapter in PEFT's format, and the merge into full weights.
#include "shardtrain/exports/peft_export.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "shardtrain/io/safetensors.h"
#include "shardtrain/runtime/atomic_write.h"
#include "shardtrain/runtime/error.h"

namespace fs = std::filesystem;

namespace shardtrain::exports {

void merge_adapters(std::map<std::string, at::Tensor>& full,
                    const std::map<std::string, at::Tensor>& adapters,
                    const model::ModelConfig& model, const model::LoraConfig& lora) {
  for (int64_t i = 0; i < model.num_layers; ++i)
    for (model::Proj p : model::layer_projections(model, i)) {
      if (!lora.targets_proj(p)) continue;
      auto& w = full.at(model::proj_weight_name(i, p));
      w = model::merge_lora(w, adapters.at(model::lora_name(i, p, 'A')),
                            adapters.at(model::lora_name(i, p, 'B')), lora.scale());
    }
}

namespace {

// The base as PEFT loads it from anywhere: an absolute directory (a relative one would be looked
// up from the reader's directory, then on the Hub); a weights file stands for its directory.
std::string base_model_path(const std::string& base) {
  if (base.empty()) return base;
  std::error_code ec;
  fs::path p = fs::absolute(base, ec).lexically_normal();
  if (!fs::is_directory(p, ec)) p = p.parent_path();
  return p.string();
}

nlohmann::json peft_adapter_config(const model::LoraConfig& lora, const std::string& base) {
  // The keys PEFT's LoraConfig needs for a plain LoRA on a causal LM; the rest take its defaults.
  return {{"peft_type", "LORA"},
          {"task_type", "CAUSAL_LM"},
          {"base_model_name_or_path", base_model_path(base)},
          {"r", lora.rank},
          {"lora_alpha", lora.alpha},
          {"lora_dropout", lora.dropout},
          {"target_modules", lora.targets},
          {"bias", "none"},
          {"fan_in_fan_out", false},
          {"inference_mode", true},
          {"init_lora_weights", true},
          {"use_rslora", false},
          {"use_dora", false},
          {"modules_to_save", nullptr},
          {"rank_pattern", nlohmann::json::object()},
          {"alpha_pattern", nlohmann::json::object()}};
}

}  // namespace

void export_peft(const std::string& dir, fsdp::FsdpEngine& engine, const std::string& base,
                 int rank, const TokenizerSource& tokenizer) {
  const auto adapters = engine.full_parameters(/*adapters=*/true);  // collective
  if (rank != 0) return;
  io::NamedTensors named;
  for (const auto& spec : engine.layout().trainable_specs())
    named.emplace_back(model::peft_key(spec.name), adapters.at(spec.name));
  // DIR.tmp renamed to DIR when whole; a full disk or read-only directory is one line (exit 2).
  runtime::write_dir_atomically(dir, [&](const std::string& into) {
    io::write_safetensors((fs::path(into) / "adapter_model.safetensors").string(), named,
                          {{"format", "pt"}});
    runtime::write_file_atomically(
        (fs::path(into) / "adapter_config.json").string(),
        peft_adapter_config(engine.spec().plan.adapters, base).dump(2) + "\n");
    write_tokenizer_files(into, tokenizer, engine.spec().model, /*full_model=*/false);
  });
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
  for (int i = 0; i < model::kNumProjections; ++i)
    if (const auto p = static_cast<model::Proj>(i);
        std::find(l.targets.begin(), l.targets.end(), model::proj_name(p)) != l.targets.end())
      ordered.push_back(model::proj_name(p));
  if (ordered.size() != l.targets.size())
    throw runtime::UsageError(opt + ": " + cfg.string() +
                              " targets modules shardtrain does not know");
  l.targets = ordered;
  l.validate();
  return l;
}

}  // namespace shardtrain::exports
