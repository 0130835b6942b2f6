// `shardtrain generate`: greedy or top-p decoding through the FSDP engine. Every rank decodes
// the same prompt (each forward is collective); rank 0 prints.
#include <iostream>

#include "shardtrain/cli/commands.h"
#include "shardtrain/cli/engine_setup.h"
#include "shardtrain/cli/options.h"
#include "shardtrain/data/instruction.h"
#include "shardtrain/data/tokenizer.h"
#include "shardtrain/model/generate.h"

namespace shardtrain::cli {

int cmd_generate(const std::vector<std::string>& args, MpiEnv& env) {
  std::string help;
  GenerateOptions o = parse_generate(args, &help);
  if (o.common.wants_help()) return print_help(help, env);
  env.set_ranks_per_node(o.fsdp.ranks_per_node);
  setup_threads(o.common.threads, env);
  Tokenizer tok(o.tokenizer);
  tok.require_fits(o.model.vocab_size);  // every rank reads the same file: all throw alike
  EngineSetup setup(o.model, o.fsdp, env, o.weights, o.seed, o.lora);
  GenerateConfig g;
  g.max_new_tokens = o.max_new_tokens, g.temperature = o.temperature, g.top_p = o.top_p, g.seed = o.seed;
  g.eos_id = tok.eos_id(), g.max_context = o.model.max_position_embeddings;
  const LogitsFn logits = [&](const at::Tensor& t) { return setup.engine->logits(t); };
  for (const auto& p : o.prompts) {
    const std::string prompt = o.template_name == "alpaca" ? alpaca_prompt(p, o.input) : p;
    const auto out = generate(logits, tok.encode(prompt), g);
    if (env.rank() == 0) std::cout << tok.decode(out) << std::endl;
  }
  return 0;
}

}  // namespace shardtrain::cli
