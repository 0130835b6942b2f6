// `shardtrain inspect CKPT`: what a checkpoint holds, and whether every dataset's bytes still
// match its CRC-32. Reads serially; run it without mpirun.
#include <ATen/ATen.h>

#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "shardtrain/ckpt/checkpoint.h"
#include "shardtrain/ckpt/checkpoint_attrs.h"
#include "shardtrain/ckpt/dataset_check.h"
#include "shardtrain/cli/commands.h"
#include "shardtrain/cli/run_checks.h"
#include "shardtrain/io/h5.h"
#include "shardtrain/io/h5_types.h"
#include "shardtrain/runtime/counted.h"
#include "shardtrain/runtime/error.h"

namespace shardtrain::cli {
int cmd_inspect(const std::vector<std::string>& args, runtime::MpiEnv& env) {
  std::string help;
  InspectOptions o = runtime::parse_on_every_rank([&] { return parse_inspect(args, &help); });
  if (o.common.wants_help()) return print_help(help, env);
  if (env.rank() != 0) return 0;
  std::lock_guard<std::recursive_mutex> lock(io::h5::library_lock());
  io::h5::Handle f = io::h5::open_file(o.checkpoint);
  const ckpt::CheckpointAttrs a =
      ckpt::read_attrs(f, o.checkpoint);  // refuses a foreign or newer file
  std::cout << o.checkpoint << "\n  format " << a.format_version << " | step " << a.step
            << " | loader epoch " << a.loader.epoch << (a.loader_in_steps ? " step " : " row ")
            << a.loader.row << " | adam step " << a.adam_step << "\n  saved by "
            << runtime::counted(a.world_size, "rank") << ", " << a.sharding;
  // A DPO run (its reference recorded) counts its batch in pairs, as --batch-size did.
  const char* unit = a.run_config.contains("reference") ? "pair" : "row";
  if (a.global_batch > 0)
    std::cout << ", global batch " << runtime::counted(a.global_batch, unit)
              << " (schedule in steps of " << runtime::counted(a.schedule_batch, unit) << ")";
  const nlohmann::json arch = a.model_config.value("architectures", nlohmann::json::array());
  std::cout << "\n  family " << a.model_config.value("model_type", "llama")
            << (arch.is_array() && !arch.empty() && arch[0].is_string()
                    ? " (" + arch[0].get<std::string>() + ")"
                    : std::string())
            << "\n  model " << a.model_config.dump() << "\n  run " << a.run_config.dump() << "\n";
  if (const std::string adapters = ckpt::adapters_line(a); !adapters.empty())
    std::cout << "  " << adapters << "\n";  // the datasets are its adapters
  int bad = 0, total = 0;
  for (const ckpt::DatasetCheck& r : ckpt::check_datasets(f)) {
    bad += r.status != "ok";
    ++total;
    std::cout << "  " << std::left << std::setw(58) << r.name << std::setw(14) << r.shape
              << "float32  " << r.status << "\n";
  }
  std::cout << total << " datasets, "
            << (bad ? std::to_string(bad) + " FAILED their checksum" : "all checksums ok")
            << std::endl;
  return bad ? 1 : 0;
}

}  // namespace shardtrain::cli
