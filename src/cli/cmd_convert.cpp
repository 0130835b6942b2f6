// `shardtrain convert`: checkpoint (HDF5) <-> Hugging Face safetensors. Both directions go
// through the FSDP engine, so any number of ranks can run it and each reads only its slices.
#include <filesystem>
#include <fstream>
#include <iostream>

#include "shardtrain/ckpt/checkpoint.h"
#include "shardtrain/ckpt/checkpoint_attrs.h"
#include "shardtrain/cli/commands.h"
#include "shardtrain/cli/run_checks.h"
#include "shardtrain/exports/hf_export.h"
#include "shardtrain/exports/peft_export.h"
#include "shardtrain/io/h5.h"
#include "shardtrain/runtime/atomic_write.h"
#include "shardtrain/runtime/error.h"
#include "shardtrain/runtime/logging.h"

namespace fs = std::filesystem;

namespace shardtrain::cli {

int cmd_convert(const std::vector<std::string>& args, runtime::MpiEnv& env) {
  std::string help;
  ConvertOptions o = runtime::parse_on_every_rank([&] { return parse_convert(args, &help); });
  if (o.common.wants_help()) return print_help(help, env);
  setup_threads(o.common.threads, env);
  const bool to_hf = o.from_checkpoint;
  const model::ModelConfig model =
      to_hf ? exports::checkpoint_model(o.input) : model::resolve_model(o.input);
  auto groups = fsdp::make_mpi_groups(fsdp::Sharding::kFullShard, env.topology(), 0);
  fsdp::ShardingConfig fc;
  model::RunPlan run;
  std::string base = o.weights;
  if (to_hf) {
    const ckpt::CheckpointAttrs saved = ckpt::read_attrs(o.input);
    run.adapters = saved.adapters();
    if (run.adapters.enabled() && base.empty()) base = saved.base_weights;
  }
  if (run.adapters.enabled() && !base.empty() && !fs::exists(base))
    throw runtime::UsageError("convert: the checkpoint's base weights " + base +
                              " do not exist; pass --weights");
  // A checkpoint with adapters is loaded onto its base (the checksum is verified); the seeded
  // init's base has none to read.
  const std::string read_from = !to_hf ? o.input : run.adapters.enabled() ? base : "";
  std::unique_ptr<io::SafetensorsModel> weights =
      read_from.empty() ? nullptr : std::make_unique<io::SafetensorsModel>(read_from);
  const exports::TokenizerSource tokenizer =
      to_hf ? exports::checkpoint_tokenizer(o.input, o.tokenizer, base)
            : exports::TokenizerSource{};
  std::string failure;  // rank 0 checks before the load; every rank then fails alike
  try {
    if (env.rank() == 0) exports::check_export_tokenizer(tokenizer, model);
  } catch (const runtime::UsageError& e) {
    failure = e.what();
  }
  if (const std::string agreed = runtime::agreed_failure(failure); !agreed.empty())
    throw runtime::AgreedUsageError(agreed);
  fsdp::FsdpEngine engine({model, fc, run}, groups, /*seed=*/0, weights.get());
  optim::Optimizer optimizer = fsdp::make_optimizer(
      engine, optim::OptimizerConfig{});  // a checkpoint holds its (empty) state
  ckpt::TrainState st;
  st.run_config = nlohmann::json{{"converted_from", o.input}};
  ckpt::StateRegistry state =
      ckpt::training_state(engine, groups, optimizer, st, base);  // collective
  if (to_hf) {
    ckpt::load(o.input, state);  // verifies every checksum on the way
    if (engine.layout().base_frozen() && !o.merge_adapters)
      exports::export_peft(o.output, engine, base, env.rank(), tokenizer);
    else
      exports::export_hf(o.output, model, engine, o.dtype, env.rank(), tokenizer);
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
