// Checkpoints to Hugging Face: full safetensors and what a checkpoint recorded.
#include "shardtrain/exports/hf_export.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "shardtrain/ckpt/checkpoint_attrs.h"
#include "shardtrain/exports/peft_export.h"
#include "shardtrain/io/h5.h"
#include "shardtrain/io/safetensors.h"
#include "shardtrain/runtime/atomic_write.h"

namespace fs = std::filesystem;

namespace shardtrain::exports {
namespace {

// The value of opt in a recorded command line (`--opt V` or `--opt=V`, the last one); "" when
// absent.
std::string recorded_option(const nlohmann::json& args, const std::string& opt) {
  std::string value;
  if (!args.is_array()) return value;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string a = args[i].is_string() ? args[i].get<std::string>() : "";
    if (a == opt && i + 1 < args.size() && args[i + 1].is_string())
      value = args[i + 1].get<std::string>();
    if (a.rfind(opt + "=", 0) == 0) value = a.substr(opt.size() + 1);
  }
  return value;
}

}  // namespace

model::ModelConfig checkpoint_model(const std::string& path) {
  return model::model_from_hf_json(ckpt::read_attrs(path).model_config, path);
}

TokenizerSource checkpoint_tokenizer(const std::string& path, const std::string& tokenizer,
                                     const std::string& base) {
  nlohmann::json run;
  {
    std::lock_guard<std::recursive_mutex> lock(io::h5::library_lock());
    io::h5::Handle f = io::h5::open_file(path);
    if (io::h5::has_attr(f, "run_config"))
      run = nlohmann::json::parse(io::h5::read_attr_string(f, "run_config"), nullptr, false);
  }
  const nlohmann::json args =
      run.is_object() ? run.value("args", nlohmann::json()) : nlohmann::json();
  const bool converted =
      run.is_object() && run.contains("converted_from") && run["converted_from"].is_string();
  TokenizerSource src;
  src.weights = !base.empty() ? base
                : converted   ? run["converted_from"].get<std::string>()
                              : recorded_option(args, "--weights");
  src.tokenizer = tokenizer;
  std::error_code ec;
  if (src.tokenizer.empty() && fs::exists(recorded_option(args, "--tokenizer"), ec))
    src.tokenizer = recorded_option(args, "--tokenizer");
  src.data = recorded_option(args, "--data");
  return src;
}

void export_hf(const std::string& dir, const model::ModelConfig& model, fsdp::FsdpEngine& engine,
               at::ScalarType dtype, int rank, const TokenizerSource& tokenizer) {
  auto full = engine.full_parameters();  // collective: every rank takes part
  if (engine.layout().base_frozen())
    merge_adapters(full, engine.full_parameters(/*adapters=*/true), model,
                   engine.spec().plan.adapters);
  if (rank != 0) return;
  io::NamedTensors named;
  for (const auto& spec : model::llama_param_specs(model))
    named.emplace_back(spec.name, full.at(spec.name).to(dtype));
  auto cfg = model::model_to_hf_json(model);
  cfg["torch_dtype"] = dtype == at::kBFloat16 ? "bfloat16" : "float32";
  // DIR.tmp renamed to DIR when whole; a full disk or read-only directory is one line (exit 2).
  runtime::write_dir_atomically(dir, [&](const std::string& into) {
    io::write_safetensors_sharded(into, named, 5ull << 30);
    runtime::write_file_atomically((fs::path(into) / "config.json").string(), cfg.dump(2) + "\n");
    write_tokenizer_files(into, tokenizer, model, /*full_model=*/true);
  });
}

}  // namespace shardtrain::exports
