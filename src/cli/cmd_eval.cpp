// `shardtrain eval`: loss/perplexity on a token file and exact match on prompt/answer records,
// through the FSDP engine on any device, strategy and number of ranks.
#include <iostream>
#include <nlohmann/json.hpp>

#include "shardtrain/cli/commands.h"
#include "shardtrain/cli/engine_setup.h"
#include "shardtrain/cli/options.h"

namespace shardtrain::cli {

int cmd_eval(const std::vector<std::string>& args, MpiEnv& env) {
  std::string help;
  EvalOptions o = parse_eval(args, &help);
  if (o.common.wants_help()) return print_help(help, env);
  env.set_ranks_per_node(o.fsdp.ranks_per_node);
  setup_threads(o.common.threads, env);
  auto data = o.data.empty() ? nullptr : open_token_file("--data", o.data, o.model);
  auto accuracy = load_accuracy_task(o.accuracy, o.model);
  EngineSetup setup(o.model, o.fsdp, env, o.weights, o.seed, o.lora);
  // --batch-size counts rows across all ranks, so any world size reads the same batches.
  const int64_t per_rank = (o.batch_size + env.size() - 1) / env.size();
  Validator validator(*setup.engine, data.get(), accuracy.get(), per_rank, o.max_batches);
  nlohmann::json j;
  std::string line;
  if (data) {
    const auto r = validator.loss();
    j["loss"] = r.loss, j["perplexity"] = r.perplexity, j["tokens"] = r.tokens;
    line += "loss " + std::to_string(r.loss) + " | perplexity " + std::to_string(r.perplexity) + " | tokens " +
            std::to_string(r.tokens);
  }
  if (accuracy) {
    const auto r = validator.accuracy();
    j["exact_match"] = r.exact_match, j["correct"] = r.correct, j["total"] = r.total;
    line += std::string(line.empty() ? "" : " | ") + "exact_match " + std::to_string(100.0 * r.exact_match) + "% (" +
            std::to_string(r.correct) + "/" + std::to_string(r.total) + ")";
    for (const auto& e : r.examples) line += "\n  answer " + e;
  }
  if (env.rank() == 0) std::cout << j.dump() << "\n" << line << std::endl;
  return 0;
}

}  // namespace shardtrain::cli
