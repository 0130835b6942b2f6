// Subcommands: each takes the arguments after its name and returns the process exit code.
#pragma once
#include <string>
#include <vector>

#include "shardtrain/cli/options.h"
#include "shardtrain/comm/device_choice.h"
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
// Sets LibTorch's intra-op pool: 0 means this rank's share of the machine's cores.
void setup_threads(int threads, const runtime::MpiEnv& env);

}  // namespace shardtrain::cli
