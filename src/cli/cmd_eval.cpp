#include <iostream>
#include <nlohmann/json.hpp>

#include "shardtrain/cli/commands.h"
#include "shardtrain/cli/options.h"

namespace shardtrain::cli {

int cmd_eval(const std::vector<std::string>& args, MpiEnv& env) {
  std::string help;
  EvalOptions o = parse_eval(args, &help);
  if (o.common.help) return print_help(help, env);
  setup_threads(o.common.threads, env);
  auto data = o.data.empty() ? nullptr : open_token_file("--data", o.data, o.model);
  auto accuracy = load_accuracy_task(o.accuracy, o.model);
  TrainConfig tc;
  tc.batch_size = o.batch_size;
  tc.seed = o.seed;
  if (data) tc.seq_len = data->seq_len();
  Trainer trainer(o.model, tc, load_or_init(o.model, o.weights, o.seed));
  nlohmann::json j;
  std::string line;
  if (data) {
    auto r = trainer.evaluate(*data, o.max_batches);
    j["loss"] = r.loss, j["perplexity"] = r.perplexity, j["tokens"] = r.tokens;
    line += "loss " + std::to_string(r.loss) + " | perplexity " + std::to_string(r.perplexity) + " | tokens " +
            std::to_string(r.tokens);
  }
  if (accuracy) {
    auto r = accuracy->run(trainer.logits_fn(), o.model);
    j["exact_match"] = r.exact_match, j["correct"] = r.correct, j["total"] = r.total;
    line += std::string(line.empty() ? "" : " | ") + "exact_match " + std::to_string(100.0 * r.exact_match) + "% (" +
            std::to_string(r.correct) + "/" + std::to_string(r.total) + ")";
    for (const auto& e : r.examples) line += "\n  answer " + e;
  }
  if (env.rank() == 0) std::cout << j.dump() << "\n" << line << std::endl;
  return 0;
}

}  // namespace shardtrain::cli
