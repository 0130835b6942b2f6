#include <iostream>

#include "shardtrain/cli/commands.h"
#include "shardtrain/cli/options.h"
#include "shardtrain/data/instruction.h"
#include "shardtrain/model/generate.h"

namespace shardtrain::cli {

int cmd_generate(const std::vector<std::string>& args, MpiEnv& env) {
  std::string help;
  GenerateOptions o = parse_generate(args, &help);
  if (o.common.help) return print_help(help, env);
  setup_threads(o.common.threads, env);
  Tokenizer tok(o.tokenizer);
  TrainConfig tc;
  Trainer model(o.model, tc, load_or_init(o.model, o.weights, o.seed));
  GenerateConfig g;
  g.max_new_tokens = o.max_new_tokens, g.temperature = o.temperature, g.top_p = o.top_p, g.seed = o.seed;
  g.eos_id = tok.eos_id(), g.max_context = o.model.max_position_embeddings;
  for (const auto& p : o.prompts) {
    const std::string prompt = o.template_name == "alpaca" ? alpaca_prompt(p, o.input) : p;
    const auto out = generate(model.logits_fn(), tok.encode(prompt), g);
    if (env.rank() == 0) std::cout << tok.decode(out) << std::endl;
  }
  return 0;
}

}  // namespace shardtrain::cli
