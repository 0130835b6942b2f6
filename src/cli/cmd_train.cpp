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

namespace shardtrain::cli {

void setup_threads(int threads, const MpiEnv& env) {
  if (threads <= 0) {
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    threads = std::max(1, cores / std::max(1, env.topology().local_size));
  }
  at::set_num_threads(threads);
}

namespace {

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
  if (o.common.help) {
    if (env.rank() == 0) std::cout << help;
    return 0;
  }
  if (env.size() > 1)
    throw UsageError("shardtrain train runs on one rank until the FSDP engine lands; launch with -np 1");
  setup_threads(o.common.threads, env);
  if (o.train.peak_tflops <= 0) o.train.peak_tflops = 1.0;  // CPU: a nominal 1 TFLOP/s, see docs/metrics.md
  auto all = load_dataset(o.data, o.train.seq_len, o.model);
  auto [train, val] = all.split(o.val_fraction);
  log::info("data: " + all.origin() + ", " + std::to_string(train.size()) + " train / " +
            std::to_string(val.size()) + " validation samples of " + std::to_string(o.train.seq_len) + " tokens");
  Trainer trainer(o.model, o.train, load_or_init(o.model, o.weights, o.train.seed));
  trainer.fit(train, &val);
  if (!o.save_model.empty()) save_model(o.save_model, o.model, trainer.params());
  return 0;
}

int cmd_eval(const std::vector<std::string>& args, MpiEnv& env) {
  std::string help;
  EvalOptions o = parse_eval(args, &help);
  if (o.common.help) {
    if (env.rank() == 0) std::cout << help;
    return 0;
  }
  setup_threads(o.common.threads, env);
  auto ds = load_dataset(o.data, o.seq_len, o.model);
  TrainConfig tc;
  tc.batch_size = o.batch_size;
  tc.seq_len = o.seq_len;
  tc.seed = o.seed;
  Trainer trainer(o.model, tc, load_or_init(o.model, o.weights, o.seed));
  auto r = trainer.evaluate(ds, o.max_batches);
  if (env.rank() == 0) {
    std::cout << nlohmann::json({{"loss", r.loss}, {"perplexity", r.perplexity}, {"tokens", r.tokens}}).dump() << "\n";
    std::cout << "loss " << r.loss << " | perplexity " << r.perplexity << " | tokens " << r.tokens << std::endl;
  }
  return 0;
}

}  // namespace shardtrain::cli
