// `shardtrain convert`: checkpoint (HDF5) <-> Hugging Face safetensors. Both directions go
// through the FSDP engine, so any number of ranks can run it and each reads only its slices.
#include <filesystem>
#include <fstream>

#include "shardtrain/ckpt/checkpoint.h"
#include "shardtrain/cli/commands.h"
#include "shardtrain/io/h5.h"
#include "shardtrain/runtime/error.h"
#include "shardtrain/runtime/logging.h"

namespace fs = std::filesystem;

namespace shardtrain::cli {
namespace {

ModelConfig checkpoint_model(const std::string& path) {
  std::lock_guard<std::recursive_mutex> lock(h5::library_lock());
  h5::Handle f = h5::open_file(path);
  if (!h5::has_attr(f, "model_config")) throw UsageError(path + " is not a shardtrain checkpoint (no model_config)");
  return model_from_hf_json(nlohmann::json::parse(h5::read_attr_string(f, "model_config")), path);
}

}  // namespace

void export_hf(const std::string& dir, const ModelConfig& model, fsdp::FsdpEngine& engine, at::ScalarType dtype,
               int rank) {
  const auto full = engine.full_parameters();  // collective: every rank takes part
  if (rank != 0) return;
  NamedTensors named;
  for (const auto& spec : llama_param_specs(model)) named.emplace_back(spec.name, full.at(spec.name).to(dtype));
  fs::create_directories(dir);
  write_safetensors_sharded(dir, named, 5ull << 30);
  auto cfg = model_to_hf_json(model);
  cfg["torch_dtype"] = dtype == at::kBFloat16 ? "bfloat16" : "float32";
  std::ofstream(fs::path(dir) / "config.json") << cfg.dump(2) << "\n";
}

int cmd_convert(const std::vector<std::string>& args, MpiEnv& env) {
  std::string help;
  ConvertOptions o = parse_convert(args, &help);
  if (o.common.wants_help()) return print_help(help, env);
  setup_threads(o.common.threads, env);
  const bool to_hf = fs::is_regular_file(o.input) && fs::path(o.input).extension() == ".h5";
  const ModelConfig model = to_hf ? checkpoint_model(o.input) : resolve_model(o.input);
  auto groups = fsdp::make_mpi_groups(fsdp::Sharding::kFullShard, env.topology(), 0);
  std::unique_ptr<SafetensorsModel> weights = to_hf ? nullptr : std::make_unique<SafetensorsModel>(o.input);
  fsdp::FsdpEngine engine(model, fsdp::FsdpConfig{}, groups, /*seed=*/0, weights.get());
  Optimizer optimizer = fsdp::make_optimizer(engine, OptimizerConfig{});  // a checkpoint holds its (empty) state
  if (to_hf) {
    ckpt::load(o.input, engine, optimizer);  // verifies every checksum on the way
    export_hf(o.output, model, engine, o.dtype, env.rank());
  } else {
    const std::string tmp = o.output + ".tmp";
    const ckpt::TrainState st{0, {}, nlohmann::json{{"converted_from", o.input}}, model_to_hf_json(model)};
    ckpt::write(tmp, MPI_COMM_WORLD, ckpt::snapshot(engine, optimizer, st, /*copy=*/false));  // no `latest`: a lone file
    if (env.rank() == 0) fs::rename(tmp, o.output);
  }
  MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
  log::info("converted " + o.input + " -> " + o.output + (to_hf ? " (Hugging Face safetensors)" : " (checkpoint)"));
  return 0;
}

}  // namespace shardtrain::cli
