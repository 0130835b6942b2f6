// Subcommands: each takes the arguments after its name and returns the process exit code.
#pragma once
#include <string>
#include <vector>

#include "shardtrain/data/token_dataset.h"
#include "shardtrain/model/params.h"
#include "shardtrain/runtime/mpi_env.h"

namespace shardtrain::cli {

int cmd_train(const std::vector<std::string>& args, MpiEnv& env);
int cmd_eval(const std::vector<std::string>& args, MpiEnv& env);

int print_help(const std::string& text, const MpiEnv& env);
// Built-in corpus when path is empty; checks every token id fits the model's vocabulary.
TokenDataset load_dataset(const std::string& path, int64_t seq_len, const ModelConfig& model);
// Safetensors weights when given, else the deterministic seeded init.
ParamStore load_or_init(const ModelConfig& model, const std::string& weights, uint64_t seed);
// Sets LibTorch's intra-op pool: 0 means this rank's share of the machine's cores.
void setup_threads(int threads, const MpiEnv& env);

}  // namespace shardtrain::cli
