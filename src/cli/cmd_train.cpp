#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "shardtrain/cli/commands.h"
#include "shardtrain/cli/options.h"
#include "shardtrain/runtime/error.h"
#include "shardtrain/runtime/logging.h"
#include "shardtrain/train/flops.h"

namespace shardtrain::cli {

int print_help(const std::string& text, const MpiEnv& env) {
  if (env.rank() == 0) std::cout << text;
  return 0;
}

void setup_threads(int threads, const MpiEnv& env) {
  if (threads <= 0) {
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    threads = std::max(1, cores / std::max(1, env.topology().local_size));
  }
  at::set_num_threads(threads);
}

TokenDataset load_dataset(const std::string& path, int64_t seq_len, const ModelConfig& model) {
  TokenDataset ds = path.empty() ? TokenDataset::builtin(seq_len) : TokenDataset::from_file(path, seq_len);
  if (ds.max_token() >= model.vocab_size)
    throw UsageError("--data " + ds.origin() + " holds token id " + std::to_string(ds.max_token()) +
                     " but the model's vocab_size is " + std::to_string(model.vocab_size) + "; raise --vocab-size");
  return ds;
}

ParamStore load_or_init(const ModelConfig& model, const std::string& weights, uint64_t seed) {
  if (weights.empty()) return ParamStore::initialize(model, seed);
  SafetensorsModel st(weights);
  auto p = ParamStore::load(model, st);
  log::info("loaded " + std::to_string(st.bytes_read()) + " bytes of weights from " + weights);
  return p;
}

namespace {

void save_model(const std::string& dir, const ModelConfig& model, const ParamStore& params) {
  std::filesystem::create_directories(dir);
  write_safetensors_sharded(dir, params.named(), 5ull << 30);
  std::ofstream(std::filesystem::path(dir) / "config.json") << model_to_hf_json(model).dump(2) << "\n";
  log::info("saved model to " + dir);
}

}  // namespace

int cmd_train(const std::vector<std::string>& args, MpiEnv& env) {
  std::string help;
  TrainOptions o = parse_train(args, &help);
  if (o.common.help) return print_help(help, env);
  if (env.size() > 1)
    throw UsageError("shardtrain train runs on one rank until the FSDP engine lands; launch with -np 1");
  setup_threads(o.common.threads, env);
  o.train.peak_tflops = resolve_peak_tflops(o.train.peak_tflops, "cpu");  // training runs on CPU until the GPU issue
  auto all = load_dataset(o.data, o.train.seq_len, o.model);
  auto [train, val] = all.split(o.val_fraction);
  log::info("data: " + all.origin() + ", " + std::to_string(train.size()) + " train / " +
            std::to_string(val.size()) + " validation samples of " + std::to_string(o.train.seq_len) + " tokens");
  Trainer trainer(o.model, o.train, load_or_init(o.model, o.weights, o.train.seed));
  trainer.fit(train, &val);
  if (!o.save_model.empty()) save_model(o.save_model, o.model, trainer.params());
  return 0;
}

}  // namespace shardtrain::cli
