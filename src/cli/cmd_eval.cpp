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
