// A low-rank adapter run's outputs: the adapter in PEFT's format, and the merge into full weights.
#include "shardtrain/exports/peft_export.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "shardtrain/io/safetensors.h"
#include "shardtrain/runtime/atomic_write.h"

namespace fs = std::filesystem;

namespace shardtrain::exports {

void merge_adapters(std::map<std::string, at::Tensor>& full,
                    const std::map<std::string, at::Tensor>& adapters,
                    const model::ModelConfig& model, const model::LoraConfig& lora) {
  for (int64_t i = 0; i < model.num_layers; ++i)
    for (model::Proj p : model::kProjections) {
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
        peft_adapter_config(engine.spec().plan.lora, base).dump(2) + "\n");
    write_tokenizer_files(into, tokenizer, engine.spec().model, /*full_model=*/false);
  });
}

}  // namespace shardtrain::exports
