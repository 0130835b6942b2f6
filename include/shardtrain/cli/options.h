// Every Boost.Program_options description lives here, so --help never drifts from parsing.
// Options come from the command line first, then from --config FILE (key = value lines).
#pragma once
#include <string>
#include <vector>

#include "shardtrain/model/config.h"
#include "shardtrain/train/trainer.h"

namespace shardtrain::cli {

struct CommonOptions {
  int threads = 0;  // LibTorch intra-op threads; 0: all cores of this rank's share
  bool help = false;
};

struct TrainOptions {
  CommonOptions common;
  ModelConfig model;
  std::string weights;     // safetensors file, directory or index (optional)
  std::string data;        // empty: the built-in corpus
  double val_fraction = 0.1;
  std::string save_model;  // directory for model.safetensors + config.json
  TrainConfig train;
};

struct EvalOptions {
  CommonOptions common;
  ModelConfig model;
  std::string weights;
  std::string data;
  int64_t seq_len = 64, batch_size = 8, max_batches = 0;
  uint64_t seed = 1234;
};

// Both throw UsageError (main exits 2) with one line naming the option to change.
// A --help request sets common.help and leaves usage text in *help_text.
TrainOptions parse_train(const std::vector<std::string>& args, std::string* help_text);
EvalOptions parse_eval(const std::vector<std::string>& args, std::string* help_text);

std::string top_level_help();

}  // namespace shardtrain::cli
