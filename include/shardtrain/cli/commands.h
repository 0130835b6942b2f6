// Subcommands: each takes the arguments after its name and returns the process exit code.
#pragma once
#include <string>
#include <vector>

#include "shardtrain/runtime/mpi_env.h"

namespace shardtrain::cli {

int cmd_train(const std::vector<std::string>& args, MpiEnv& env);
int cmd_eval(const std::vector<std::string>& args, MpiEnv& env);

// Sets LibTorch's intra-op pool: 0 means this rank's share of the machine's cores.
void setup_threads(int threads, const MpiEnv& env);

}  // namespace shardtrain::cli
