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

std::unique_ptr<TokenFile> open_token_file(const char* opt, const std::string& path, const ModelConfig& model) {
  auto f = std::make_unique<TokenFile>(path);
  if (f->meta().max_token_id >= model.vocab_size)
    throw UsageError(std::string(opt) + " " + path + " holds token id " + std::to_string(f->meta().max_token_id) +
                     " but the model's vocab_size is " + std::to_string(model.vocab_size) +
                     "; use a model whose vocabulary covers the tokenizer (--vocab-size)");
  if (f->seq_len() > model.max_position_embeddings)
    throw UsageError(std::string(opt) + " " + path + " has rows of " + std::to_string(f->seq_len()) +
                     " tokens, more than the model's max_position_embeddings " +
                     std::to_string(model.max_position_embeddings) + "; re-run prepare with a smaller --seq-len");
  return f;
}

std::unique_ptr<AccuracyTask> load_accuracy_task(const AccuracyOptions& o, const ModelConfig& model) {
  if (o.file.empty()) return nullptr;
  DataFormat fmt = o.format;
  auto task = std::make_unique<AccuracyTask>(AccuracyTask{Tokenizer(o.tokenizer), {}, o.max_new_tokens});
  if (task->tokenizer.vocab_size() > model.vocab_size)
    throw UsageError("--tokenizer has " + std::to_string(task->tokenizer.vocab_size()) + " pieces but the model's vocab_size is " +
                     std::to_string(model.vocab_size));
  task->records = read_records(o.file, fmt, o.samples);
  if (task->records.empty()) throw UsageError("--accuracy-file " + o.file + " has no usable records");
  return task;
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
  auto train = open_token_file("--data", o.data, o.model);
  auto val = o.val_data.empty() ? nullptr : open_token_file("--val-data", o.val_data, o.model);
  auto accuracy = load_accuracy_task(o.accuracy, o.model);
  o.train.seq_len = train->seq_len();
  LoaderConfig lc;
  lc.micro_batch = o.train.batch_size, lc.grad_accum = o.train.grad_accum, lc.seed = o.train.seed;
  lc.rank = env.rank(), lc.world = env.size();
  DataLoader loader(*train, lc);
  log::info("data: " + o.data + ": " + std::to_string(train->rows()) + " rows of " + std::to_string(train->seq_len()) +
            " tokens (" + train->meta().packing + ", " + train->meta().format + "), global batch " +
            std::to_string(loader.global_batch()) + (val ? "; validation " + o.val_data + ": " + std::to_string(val->rows()) + " rows" : ""));
  Trainer trainer(o.model, o.train, load_or_init(o.model, o.weights, o.train.seed));
  Validation v;
  v.data = val.get();
  if (accuracy) v.accuracy = [&] { return accuracy->run(trainer.logits_fn(), o.model).exact_match; };
  trainer.fit(loader, v);
  if (!o.save_model.empty()) save_model(o.save_model, o.model, trainer.params());
  return 0;
}

}  // namespace shardtrain::cli
