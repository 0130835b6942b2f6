// Subcommands: each takes the arguments after its name and returns the process exit code.
#pragma once
#include <string>
#include <vector>

#include "shardtrain/cli/options.h"
#include "shardtrain/data/token_file.h"
#include "shardtrain/runtime/mpi_env.h"

namespace shardtrain::cli {

int cmd_prepare(const std::vector<std::string>& args, runtime::MpiEnv& env);
int cmd_train(const std::vector<std::string>& args, runtime::MpiEnv& env);
int cmd_eval(const std::vector<std::string>& args, runtime::MpiEnv& env);
int cmd_generate(const std::vector<std::string>& args, runtime::MpiEnv& env);
int cmd_convert(const std::vector<std::string>& args, runtime::MpiEnv& env);
int cmd_inspect(const std::vector<std::string>& args, runtime::MpiEnv& env);
int cmd_preflight(const std::vector<std::string>& args, runtime::MpiEnv& env);
int cmd_scaling(const std::vector<std::string>& args, runtime::MpiEnv& env);
int cmd_plan(const std::vector<std::string>& args);      // runs without MPI
int cmd_tokenize(const std::vector<std::string>& args);  // runs without MPI
int cmd_report(const std::vector<std::string>& args, runtime::MpiEnv& env);

int print_help(const std::string& text, const runtime::MpiEnv& env);
// One CUDA device per rank, picked by the rank's place among the ranks on its machine (never the
// simulated nodes of --ranks-per-node) among the visible GPUs (CUDA_VISIBLE_DEVICES applies), for
// --device auto|cuda; cpu otherwise. Selects the device. Throws UsageError for --device cuda on a
// node without GPUs, and for more ranks on a machine than it has visible GPUs.
struct DeviceChoice {
  bool cuda = false;
  int index = -1;
  std::string name = "cpu";  // the GPU's name, for the FLOP/s peak table
};
DeviceChoice choose_device(const std::string& spec, const runtime::MpiEnv& env);
// Pure: the GPU of the rank that is machine_local_rank of the machine_local_size ranks sharing
// `host` (MPI_COMM_TYPE_SHARED), so no two ranks of a machine share one. Throws UsageError naming
// the host, its ranks and its GPUs when it has more ranks than visible GPUs.
int gpu_for_rank(int machine_local_rank, int machine_local_size, int visible_gpus,
                 const std::string& host);

// Sets LibTorch's intra-op pool: 0 means this rank's share of the machine's cores.
void setup_threads(int threads, const runtime::MpiEnv& env);

}  // namespace shardtrain::cli
