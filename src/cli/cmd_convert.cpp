// `shardtrain convert`: checkpoint (HDF5) <-> Hugging Face safetensors. Both directions go
// through the FSDP engine, so any number of ranks can run it and each reads only its slices.
#include <filesystem>
#include <fstream>
#include <iostream>

#include "shardtrain/ckpt/checkpoint.h"
#include "shardtrain/ckpt/checkpoint_attrs.h"
#include "shardtrain/cli/commands.h"
#include "shardtrain/cli/run_checks.h"
#include "shardtrain/io/h5.h"
#include "shardtrain/runtime/atomic_write.h"
#include "shardtrain/runtime/error.h"
#include "shardtrain/runtime/logging.h"

namespace fs = std::filesystem;

namespace shardtrain::cli {
namespace {

model::ModelConfig checkpoint_model(const std::string& path) {
  return model::model_from_hf_json(ckpt::read_attrs(path).model_config, path);
}

// A LoRA checkpoint's settings (rank 0: not LoRA) and the base path it records.
model::LoraConfig checkpoint_lora(const std::string& path, std::string* base) {
  const ckpt::CheckpointAttrs a = ckpt::read_attrs(path);
  model::LoraConfig l;
  if (a.lora_rank == 0) return l;
  l.rank = a.lora_rank;
  l.alpha = a.lora_alpha;
  l.dropout = a.lora_dropout;
  l.targets = model::parse_lora_targets(a.lora_targets);
  *base = a.base_weights;
  return l;
}

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

// A checkpoint's export tokenizer: convert's --weights and --tokenizer, else what its run recorded
// (--weights, or for a converted checkpoint the model directory it came from; an existing
// --tokenizer).
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
  if (engine.config().lora.enabled())
    merge_adapters(full, engine.full_parameters(/*adapters=*/true), model, engine.config().lora);
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

int cmd_convert(const std::vector<std::string>& args, runtime::MpiEnv& env) {
  std::string help;
  ConvertOptions o = parse_on_every_rank([&] { return parse_convert(args, &help); });
  if (o.common.wants_help()) return print_help(help, env);
  setup_threads(o.common.threads, env);
  const bool to_hf = o.from_checkpoint;
  const model::ModelConfig model =
      to_hf ? checkpoint_model(o.input) : model::resolve_model(o.input);
  auto groups = fsdp::make_mpi_groups(fsdp::Sharding::kFullShard, env.topology(), 0);
  fsdp::FsdpConfig fc;
  std::string base = o.weights;
  if (to_hf) fc.lora = checkpoint_lora(o.input, o.weights.empty() ? &base : &o.weights);
  if (fc.lora.enabled() && !base.empty() && !fs::exists(base))
    throw runtime::UsageError("convert: the checkpoint's base weights " + base +
                              " do not exist; pass --weights");
  // A LoRA checkpoint is loaded onto its base (the checksum is verified); the seeded init's base
  // has none to read.
  const std::string read_from = !to_hf ? o.input : fc.lora.enabled() ? base : "";
  std::unique_ptr<io::SafetensorsModel> weights =
      read_from.empty() ? nullptr : std::make_unique<io::SafetensorsModel>(read_from);
  const TokenizerSource tokenizer =
      to_hf ? checkpoint_tokenizer(o.input, o.tokenizer, base) : TokenizerSource{};
  std::string failure;  // rank 0 checks before the load; every rank then fails alike
  try {
    if (env.rank() == 0) check_export_tokenizer(tokenizer, model);
  } catch (const runtime::UsageError& e) {
    failure = e.what();
  }
  if (const std::string agreed = agreed_failure(failure); !agreed.empty())
    throw runtime::AgreedUsageError(agreed);
  fsdp::FsdpEngine engine(model, fc, groups, /*seed=*/0, weights.get());
  optim::Optimizer optimizer = fsdp::make_optimizer(
      engine, optim::OptimizerConfig{});  // a checkpoint holds its (empty) state
  ckpt::TrainState st;
  st.run_config = nlohmann::json{{"converted_from", o.input}};
  ckpt::StateRegistry state = ckpt::training_state(engine, optimizer, st, base);  // collective
  if (to_hf) {
    ckpt::load(o.input, state);  // verifies every checksum on the way
    if (engine.config().lora.enabled() && !o.merge_lora)
      export_peft(o.output, engine, base, env.rank(), tokenizer);
    else
      export_hf(o.output, model, engine, o.dtype, env.rank(), tokenizer);
  } else {
    const std::string tmp = o.output + ".tmp";
    ckpt::write(tmp, MPI_COMM_WORLD, state.snapshot(/*copy=*/false));  // no `latest`: a lone file
    if (env.rank() == 0) fs::rename(tmp, o.output);
  }
  MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
  if (env.rank() == 0)  // the command's result: stdout
    std::cout << "converted " << o.input << " -> " << o.output
              << (to_hf ? " (Hugging Face safetensors)" : " (checkpoint)") << std::endl;
  return 0;
}

}  // namespace shardtrain::cli
